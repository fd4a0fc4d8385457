#!/usr/bin/env bash
# GPU check (on a machine with an NVIDIA GPU): install, run the CUDA tests, the acceptance
# with cuda vs cpu parity, and the GPU benchmarks; logs and report.json go to RESULTS_DIR.
#   bash scripts/gpu_check.sh RESULTS_DIR [COPY_DIR] [STEPS]
# STEPS: comma-separated, of tests, acceptance, bench (default: all three). Every step has its own
# time limit (below), so one that hangs or crashes costs its limit and no more.
#
# Two ways to install:
# - a machine with internet: `scripts/setup.sh --install-only` (a .venv, like everywhere else);
# - a machine without (the lent H200s: Python 3.12 with numpy, Pillow, imageio, tqdm, scipy and
#   pytest already there): the wheels in .whl/, filled beforehand by `scripts/gpu_wheels.sh`, go
#   into /tmp/site, and the system python3 runs the repository from its root.
# With COPY_DIR, after every step the logs are copied there and the whole RESULTS_DIR archived
# there as gpu.tar.gz, so a run stopped at its time limit still returns what it finished.
# On the device tool (15 minutes of device time per session, 10 per call), after
# `bash scripts/gpu_wheels.sh` here:
#   run(command='true', carry=['.whl-warp1'])   then the same with '.whl-warp2' and '.whl-warp3',
#   one right after the other (each part stays in the repository copy there while the machine is
#   warm, 30 s after a call), then two calls, the second right after the first:
#   run(command='bash scripts/gpu_check.sh /tmp/gpu $OUT tests,acceptance', carry=['.whl'], timeout_s=520)
#   run(command='bash scripts/gpu_check.sh /tmp/gpu $OUT bench', carry=['.whl'], timeout_s=330)
# which joins the parts into Warp's wheel (without all three, the benchmarks time ours only).
# At most seven files come back per call, under the tool's limit of 8.
# The first H200 run (2026-12-01, docs/RESULTS.md) took: install 10 s, the first 8 claims of the
# acceptance 150 s with cold caches, the launch benchmark ~80 s at 20,000 launches per cell.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:?usage: scripts/gpu_check.sh RESULTS_DIR [COPY_DIR]}"
COPY_DIR="${2:-}"
STEPS=",${3:-tests,acceptance,bench},"
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1
status=0
step() {  # step NAME TIMEOUT_S COMMAND...: run one step, log it, remember failure
  local name=$1 limit=$2; shift 2
  echo "== $name"
  timeout "$limit" "$@" >"$OUT_DIR/$name.log" 2>&1; local rc=$?
  echo "   exit $rc"; tail -n 5 "$OUT_DIR/$name.log"
  (( rc == 0 )) || status=1
  if [[ -n "$COPY_DIR" ]]; then
    cp "$OUT_DIR"/*.log "$OUT_DIR"/*.txt "$COPY_DIR"/ 2>/dev/null
    tar czf "$COPY_DIR/gpu.tar.gz" -C "$(dirname "$OUT_DIR")" "$(basename "$OUT_DIR")"
  fi
}
nvidia-smi >"$OUT_DIR/nvidia-smi.txt" 2>&1 || true
if compgen -G ".whl/*.whl" >/dev/null; then
  if [[ -f .whl-warp1/WHEEL_NAME && -d .whl-warp2 && -d .whl-warp3 ]]; then  # Warp, carried in three parts
    cat .whl-warp1/part* .whl-warp2/part* .whl-warp3/part* >".whl/$(cat .whl-warp1/WHEEL_NAME)"
  fi
  step install 90 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:$PWD"
  PY=python3
else
  step install 240 bash scripts/setup.sh --install-only
  PY=.venv/bin/python
fi
"$PY" -c "import sys, numpy, taichi; print(sys.version.split()[0], 'numpy', numpy.__version__, 'taichi', taichi.__version__)" \
  >>"$OUT_DIR/nvidia-smi.txt" 2>&1
if [[ $STEPS == *,tests,* ]]; then
  # --continue-on-collection-errors: a module importing what this machine lacks (imgui-bundle) still lets the rest run
  step cuda-tests 150 "$PY" -m pytest -q -m cuda -p no:cacheprovider -rs --continue-on-collection-errors
fi
if [[ $STEPS == *,acceptance,* ]]; then
  step acceptance 330 "$PY" -m app --headless --arch cuda --parity-arch cpu --out "$OUT_DIR/acceptance"
fi
if [[ $STEPS == *,bench,* ]]; then  # one step per benchmark: a crash or a hang in one keeps the others
  step bench-launch 60 "$PY" -m app bench launch --arch cuda --launches 5000 --out "$OUT_DIR/bench"
  step bench-raymarch 45 "$PY" -m app bench raymarch --arch cuda --out "$OUT_DIR/bench"
  step bench-fit 45 "$PY" -m app bench fit_overhead --arch cuda --out "$OUT_DIR/bench"
  step bench-closest 150 "$PY" -m app bench closest --arch cuda --repeats 3 --out "$OUT_DIR/bench"
fi
exit $status
