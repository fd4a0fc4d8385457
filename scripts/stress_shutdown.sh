#!/usr/bin/env bash
# The shutdown tests under load, round after round (issue 30's proof that the shutdown races are gone):
#
#   bash scripts/stress_shutdown.sh [ROUNDS] [HOGS] [LOG_DIR]     # defaults: 30 rounds, 2 busy loops, out/stress
#
# Runs the 7 real-process shutdown tests of tests/test_misuse.py (fit SIGINT, render SIGTERM, headless and app
# Ctrl-C, --frames + Ctrl-C, a worker killed and closed from many threads, a worker ignoring Ctrl-C) under Xvfb,
# ROUNDS times, beside HOGS busy loops that keep the cores loaded. Every round's whole output is kept in
# LOG_DIR/round_<i>.log; one line per round (its start, the load, pytest's summary). Exit 0 when every round
# passed, 1 otherwise (the failed rounds are named). Takes 1-2 minutes a round on 2 cores.
set -u
cd "$(dirname "$0")/.."
ROUNDS=${1:-30}
HOGS=${2:-2}
LOGS=${3:-out/stress}
TESTS="fit_sigint_keeps_its_work or render_sigterm_keeps_its_frames or headless_ctrl_c or app_ctrl_c"
TESTS="$TESTS or app_frames_ctrl_c_after_warm_up or killed_and_closed_from_many_threads or ignores_ctrl_c"
mkdir -p "$LOGS"
hogs=()
for _ in $(seq 1 "$HOGS"); do
  ( while true; do :; done ) &
  hogs+=($!)
done
trap 'kill "${hogs[@]}" 2>/dev/null' EXIT
trap 'exit 130' INT TERM  # through the EXIT trap: a stopped run leaves no busy loop behind
failed=()
for i in $(seq 1 "$ROUNDS"); do
  echo "round $i start $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  xvfb-run -a -s "-screen 0 1280x800x24" .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_misuse.py \
    -k "$TESTS" -rf --tb=long > "$LOGS/round_$i.log" 2>&1
  rc=$?
  tail -1 "$LOGS/round_$i.log"
  if [ "$rc" -ne 0 ]; then
    grep "^FAILED" "$LOGS/round_$i.log"
    failed+=("$i")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "rounds that failed: ${failed[*]} (of $ROUNDS; their output: $LOGS/round_<i>.log)"
  exit 1
fi
echo "all $ROUNDS rounds passed"
