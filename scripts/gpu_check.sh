#!/usr/bin/env bash
# GPU check (on a machine with an NVIDIA GPU): install, run the CUDA tests, the acceptance
# with cuda vs cpu parity, and the GPU benchmarks; logs and report.json go to $1.
# Budget: under 8 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:?usage: scripts/gpu_check.sh RESULTS_DIR}"
mkdir -p "$OUT_DIR"
export SHANNON_QUIET=1
status=0
step() {  # step NAME TIMEOUT_S COMMAND...: run one step, log it, remember failure
  local name=$1 limit=$2; shift 2
  echo "== $name"
  timeout "$limit" "$@" >"$OUT_DIR/$name.log" 2>&1; local rc=$?
  echo "   exit $rc"; tail -n 5 "$OUT_DIR/$name.log"
  (( rc == 0 )) || status=1
}
nvidia-smi >"$OUT_DIR/nvidia-smi.txt" 2>&1 || true
step install 240 bash scripts/setup.sh --install-only
step cuda-tests 180 .venv/bin/python -m pytest -q -m cuda -p no:cacheprovider
step acceptance 240 .venv/bin/python -m app --headless --arch cuda --parity-arch cpu --out "$OUT_DIR/acceptance"
step bench 300 .venv/bin/python -m app bench all --arch cuda --out "$OUT_DIR/bench"
exit $status
