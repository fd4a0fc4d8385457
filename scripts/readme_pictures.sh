#!/usr/bin/env bash
# Make the README's pictures in docs/pictures/ from the real program (scripts/readme_pictures.py says how).
# Usage: bash scripts/readme_pictures.sh [scene.png app.png fit.png invert.png]   (default: all four)
# The desktop app needs a display: Xvfb provides one, at the app's default window size.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x .venv/bin/python ]]; then echo "error: run 'bash scripts/setup.sh' first (.venv is missing)" >&2; exit 2; fi
exec xvfb-run -a -s "-screen 0 1280x800x24" .venv/bin/python scripts/readme_pictures.py "$@"
