#!/usr/bin/env bash
# Run the test suite (after scripts/setup.sh). GUI tests need a display: Xvfb provides one.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x .venv/bin/python ]]; then echo "error: run 'bash scripts/setup.sh' first (.venv is missing)" >&2; exit 2; fi
exec xvfb-run -a -s "-screen 0 1280x800x24" .venv/bin/python -m pytest -q "$@"
