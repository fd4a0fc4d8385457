#!/usr/bin/env bash
# GPU check: everything a GPU run owes in one lease (issue 29 item 1): install, the CUDA tests, every claim on
# cuda with cpu parity, then the benchmarks launch, raymarch, fit_iteration, invert and closest on cuda.
#
#   bash scripts/gpu_check.sh [--plan] [--dry-run] [--steps LIST] [--budget S] [RESULTS_DIR [COPY_DIR [LIST]]]
#
# --plan      print the plan (each step: its time limit and command line; the total) and exit.
# --dry-run   run every step here, on the cpu, with tiny sizes (every command line and flag checked; the install is
#             checked, not run: it would rewrite .venv), after printing the dry run's plan. RESULTS_DIR defaults to
#             a fresh temporary folder. Nothing in it is a GPU figure.
# --steps     comma-separated step names (below) or groups: tests (cuda-tests), acceptance, bench (every bench-*);
#             default all. The install always runs first (it picks the Python). The old third argument, the same.
# --budget S  the whole run's device time (default 580 s, inside one 600 s device call): before each step its limit
#             is cut to what is left (minus 5 s), and a step with under 10 s left is not started ("not-run"); 0: none
#             (the dry run's default).
# COPY_DIR    (default $OUT, the device tool's folder) after every step receives: summary.txt (each step's exit code,
#             wall time, limit, last log line; not-run for those not reached), env.txt (GPU, Python, numpy, Taichi,
#             commit), logs.txt (the end of every step's log), report.json (the acceptance's, once written) and
#             gpu.tar.gz (the whole RESULTS_DIR: every log, report, table and JSON): 5 files, under the tool's 8. So a
#             lease that ends early still returns every step that finished.
# Exit code: 0 when every step run exited 0, else 1.
#
# Steps and limits on the device (the plan; `--plan` prints it with the command lines): install 40 s (wheels) or
# 240 s (setup.sh), cuda-tests 75, acceptance 230, bench-launch 40, bench-raymarch 25, bench-fit 30, bench-invert 70,
# bench-closest 60: 570 s with the wheels. Measured so far on an H200 (2026-12-01, docs/RESULTS.md "First GPU run"):
# install 10 s, the first 8 claims 150 s with cold caches, the launch benchmark ~80 s at 20,000 launches per cell
# (here: 5,000). The other limits are estimates: no GPU measured them.
#
# Two ways to install:
# - a machine with internet: `scripts/setup.sh --install-only` (a .venv, like everywhere else);
# - a machine without (the lent H200s: Python 3.12 with numpy, Pillow, imageio, tqdm, scipy and
#   pytest already there): the wheels in .whl/, filled beforehand by `scripts/gpu_wheels.sh`, go
#   into /tmp/site, and the system python3 runs the repository from its root.
# On the device tool (15 minutes of device time per session, 10 per call), after
# `bash scripts/gpu_wheels.sh` here:
#   run(command='true', carry=['.whl-warp1'])   then the same with '.whl-warp2' and '.whl-warp3',
#   one right after the other (each part stays in the repository copy there while the machine is
#   warm, 30 s after a call), then at once:
#   run(command='bash scripts/gpu_check.sh /tmp/gpu', carry=['.whl'], timeout_s=600)
# which joins the parts into Warp's wheel (without all three, the benchmarks time ours only). To rerun what
# failed or was not reached, on the still-warm machine: `bash scripts/gpu_check.sh --steps bench-closest /tmp/gpu`.
set -uo pipefail
cd "$(dirname "$0")/.."

plan=0
dry=0
budget=""
install=auto
steps_arg=""
positional=()
while (( $# )); do
  case "$1" in
    --plan) plan=1 ;;
    --dry-run) dry=1 ;;
    --steps) steps_arg="${2:?--steps needs a list}"; shift ;;
    --steps=*) steps_arg="${1#--steps=}" ;;
    --budget) budget="${2:?--budget needs seconds}"; shift ;;
    --budget=*) budget="${1#--budget=}" ;;
    --install) install="${2:?--install needs wheels, setup or auto}"; shift ;;
    --install=*) install="${1#--install=}" ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) positional+=("$1") ;;
  esac
  shift
done
OUT_DIR="${positional[0]:-}"
COPY_DIR="${positional[1]:-${OUT:-}}"
[[ -z $steps_arg ]] && steps_arg="${positional[2]:-all}"
if (( !plan && !dry )) && [[ -z $OUT_DIR ]]; then
  echo "usage: scripts/gpu_check.sh [--plan] [--dry-run] [--steps LIST] [--budget S] RESULTS_DIR [COPY_DIR [LIST]]" >&2
  exit 2
fi
if [[ -z $budget ]]; then budget=580; (( dry )) && budget=0; fi  # dry run: generous limits of its own, no budget
[[ $budget =~ ^[0-9]+$ ]] || { echo "error: --budget $budget: whole seconds expected" >&2; exit 2; }
if (( dry && !plan )) && [[ -z $OUT_DIR ]]; then OUT_DIR="$(mktemp -d /tmp/gpu-check-dry.XXXXXX)"; fi
D="${OUT_DIR:-RESULTS_DIR}"

# ---- the interpreter and the install step
case "$install" in
  auto) wheels=0; compgen -G ".whl/*.whl" >/dev/null && wheels=1 ;;
  wheels) wheels=1 ;;
  setup) wheels=0 ;;
  *) echo "error: --install $install: wheels, setup or auto expected" >&2; exit 2 ;;
esac
if (( dry )); then
  PY=python3; [[ -x .venv/bin/python ]] && PY=.venv/bin/python
  install_limit=40
  install_cmd=(bash -n scripts/setup.sh)  # checked, not run: it would rewrite .venv
elif (( wheels )); then
  PY=python3
  install_limit=40
  install_cmd=(python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site)
else
  PY=.venv/bin/python
  install_limit=240
  install_cmd=(bash scripts/setup.sh --install-only)
fi

# ---- the plan: names, device limits, dry-run limits, command lines (device, dry run)
names=() limits=() cmds=()
add() {  # add NAME DEVICE_LIMIT DRY_RUN_LIMIT DEVICE_COMMAND... -- DRY_RUN_COMMAND...
  local name=$1 limit=$2 dry_limit=$3; shift 3
  local device=() dryc=()
  while (( $# )) && [[ $1 != -- ]]; do device+=("$1"); shift; done
  shift; dryc=("$@")
  names+=("$name")
  if (( dry )); then limits+=("$dry_limit"); cmds+=("$(quoted "${dryc[@]}")")
  else limits+=("$limit"); cmds+=("$(quoted "${device[@]}")"); fi
}
quoted() {  # the words as one command line for eval: plain words as they are, others shell-quoted
  local w out=()
  for w in "$@"; do
    if [[ $w =~ ^[A-Za-z0-9_./=:,@%+-]+$ ]]; then out+=("$w"); else out+=("$(printf '%q' "$w")"); fi
  done
  echo "${out[*]}"
}
B="$D/bench"
tiny_closest=(--meshes icosphere --sizes 1000 --repeats 1)
add install "$install_limit" 60 "${install_cmd[@]}" -- "${install_cmd[@]}"
(( wheels && !dry )) && cmds[0]+=" .whl/*.whl"  # the glob expands when the step runs
add cuda-tests 75 180 "$PY" -m pytest -q -m cuda -p no:cacheprovider -rs --continue-on-collection-errors --junitxml="$D/cuda-tests.xml" \
  -- "$PY" -m pytest -q -m cuda -p no:cacheprovider -rs --continue-on-collection-errors --junitxml="$D/cuda-tests.xml"
add acceptance 230 180 "$PY" -m app --headless --arch cuda --parity-arch cpu --out "$D/acceptance" \
  -- "$PY" -m app --headless --arch cpu --parity-arch cpu --out "$D/acceptance" --only affine,tape_chain
add bench-launch 40 120 "$PY" -m app bench launch --arch cuda --launches 5000 --repeats 3 --out "$B" --json "$B/launch.json" \
  -- "$PY" -m app bench launch --arch cpu --launches 200 --repeats 1 --out "$B" --json "$B/launch.json"
add bench-raymarch 25 180 "$PY" -m app bench raymarch --arch cuda --repeats 5 --out "$B" \
  -- "$PY" -m app bench raymarch --arch cpu --repeats 1 --no-lavapipe --out "$B"
add bench-fit 30 180 "$PY" -m app bench fit_iteration --arch cuda --targets spot --subdiv 4 --iters 150 --rounds 1 --out "$B" \
  -- "$PY" -m app bench fit_iteration --arch cpu --targets spot --subdiv 2 --iters 60 --rounds 1 --out "$B"
add bench-invert 70 300 "$PY" -m app bench invert --arch cuda --sizes 1024x512 --repeats 5 --no-drjit --no-memory --out "$B" \
  -- "$PY" -m app bench invert --arch cpu --sizes 256x128 --repeats 1 --no-drjit --no-memory --out "$B"
add bench-closest 60 180 "$PY" -m app bench closest --arch cuda --meshes icosphere,spot254k --repeats 3 \
  --no-fcpw --no-fcpw-simd --no-open3d --no-libigl --out "$B" \
  -- "$PY" -m app bench closest --arch cpu "${tiny_closest[@]}" --no-fcpw --no-fcpw-simd --no-open3d --no-libigl --out "$B"

# ---- which steps: names or groups; the install always
wanted=",install,"
IFS=, read -ra asked <<<"$steps_arg"
for s in "${asked[@]}"; do
  case "$s" in
    all) for n in "${names[@]}"; do wanted+="$n,"; done ;;
    tests) wanted+="cuda-tests," ;;
    bench) for n in "${names[@]}"; do [[ $n == bench-* ]] && wanted+="$n,"; done ;;
    install) ;;
    *) if [[ " ${names[*]} " == *" $s "* ]]; then wanted+="$s,"
       else echo "error: --steps: unknown step '$s' (steps: ${names[*]}; groups: all, tests, bench)" >&2; exit 2; fi ;;
  esac
done
selected=()
for i in "${!names[@]}"; do [[ $wanted == *",${names[$i]},"* ]] && selected+=("$i"); done

print_plan() {
  local total=0 i
  if (( dry )); then echo "gpu_check plan: DRY RUN on the cpu, tiny sizes (limits here are generous: caches may be cold)"
  else echo "gpu_check plan: device run on cuda (budget ${budget} s; install via $( ((wheels)) && echo 'the wheels in .whl/' || echo 'scripts/setup.sh --install-only'))"; fi
  for i in "${selected[@]}"; do
    printf '  %-15s limit %4d s  %s\n' "${names[$i]}" "${limits[$i]}" "${cmds[$i]}"
    total=$(( total + limits[i] ))
  done
  echo "  total planned: ${total} s ($(awk -v t="$total" 'BEGIN { printf "%.1f", t / 60 }') min) over ${#selected[@]} steps"
  if (( budget > 0 && total > budget )); then
    echo "  (over the ${budget} s budget: the last steps get what is left of it, or do not run)"
  fi
}
if (( plan )); then print_plan; exit 0; fi

# ---- the run
mkdir -p "$OUT_DIR" "$B" || exit 2
[[ -n $COPY_DIR ]] && { mkdir -p "$COPY_DIR" || exit 2; }
export PYTHONUNBUFFERED=1
print_plan | tee "$OUT_DIR/plan.txt"
started=$EPOCHREALTIME
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
declare -A rc_of wall_of limit_of last_of
for i in "${selected[@]}"; do rc_of[$i]=not-run; wall_of[$i]=-; limit_of[$i]=${limits[$i]}; last_of[$i]=""; done

elapsed() { awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
write_summary() {
  local f="$OUT_DIR/summary.txt" i total=0 ok=0
  {
    echo "# scripts/gpu_check.sh $( ((dry)) && echo 'DRY RUN on the cpu (tiny sizes; no GPU figures)' || echo 'device run' ), commit $commit, started $(date -u -d "@${started%.*}" '+%Y-%m-%d %H:%M:%S UTC' 2>/dev/null), budget ${budget} s"
    printf 'step\trc\twall_s\tlimit_s\tlast line of its log\n'
    for i in "${selected[@]}"; do
      printf '%s\t%s\t%s\t%s\t%s\n' "${names[$i]}" "${rc_of[$i]}" "${wall_of[$i]}" "${limit_of[$i]}" "${last_of[$i]}"
      total=$(( total + limits[i] )); [[ ${rc_of[$i]} == 0 ]] && ok=$(( ok + 1 ))
    done
    echo "# total wall $(elapsed) s of ${total} s planned; ${ok} of ${#selected[@]} steps exited 0"
  } >"$f.tmp" && mv "$f.tmp" "$f"
}
copy_out() {  # everything so far to COPY_DIR: 5 files at most
  [[ -n $COPY_DIR ]] || return 0
  local i
  cp "$OUT_DIR/summary.txt" "$OUT_DIR/env.txt" "$COPY_DIR/" 2>/dev/null
  for i in "${selected[@]}"; do
    [[ -f "$OUT_DIR/${names[$i]}.log" ]] && { echo "===== ${names[$i]} (exit ${rc_of[$i]})"; tail -n 40 "$OUT_DIR/${names[$i]}.log"; }
  done >"$COPY_DIR/logs.txt"
  [[ -f "$OUT_DIR/acceptance/report.json" ]] && cp "$OUT_DIR/acceptance/report.json" "$COPY_DIR/report.json"
  tar czf "$COPY_DIR/gpu.tar.gz.tmp" -C "$(dirname "$OUT_DIR")" "$(basename "$OUT_DIR")" 2>/dev/null \
    && mv "$COPY_DIR/gpu.tar.gz.tmp" "$COPY_DIR/gpu.tar.gz"
}
{
  echo "commit $commit; mode $( ((dry)) && echo dry-run || echo device )"
  uname -a
  if command -v nvidia-smi >/dev/null; then nvidia-smi 2>&1; else echo "nvidia-smi: not on this machine"; fi
} >"$OUT_DIR/env.txt" 2>&1
write_summary; copy_out

status=0
for i in "${selected[@]}"; do
  name=${names[$i]} limit=${limits[$i]}
  if (( budget > 0 )); then
    left=$(awk -v b="$budget" -v e="$(elapsed)" 'BEGIN { printf "%d", b - e - 5 }')
    if (( left < 10 )); then echo "== $name: not run (${left} s of the budget left)"; status=1; continue; fi
    (( left < limit )) && limit=$left
  fi
  limit_of[$i]=$limit
  echo "== $name (limit ${limit} s)"
  t0=$EPOCHREALTIME
  if [[ $name == install ]] && (( wheels && ! dry )); then
    if [[ -f .whl-warp1/WHEEL_NAME && -d .whl-warp2 && -d .whl-warp3 ]]; then  # Warp, carried in three parts
      cat .whl-warp1/part* .whl-warp2/part* .whl-warp3/part* >".whl/$(cat .whl-warp1/WHEEL_NAME)"
    fi
  fi
  eval "timeout -k 10 $limit ${cmds[$i]}" >"$OUT_DIR/$name.log" 2>&1; rc=$?
  [[ $name == install ]] && (( wheels && !dry )) && export PYTHONPATH="/tmp/site:$PWD"
  rc_of[$i]=$rc
  wall_of[$i]=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  last_of[$i]=$(grep -v '^[[:space:]]*$' "$OUT_DIR/$name.log" | tail -n 1 | tr '\t' ' ' | cut -c1-160)
  [[ -n ${last_of[$i]} ]] || last_of[$i]="(no output)"
  (( rc == 124 || rc == 137 )) && last_of[$i]="TIMED OUT at ${limit} s; ${last_of[$i]}"
  echo "   exit $rc in ${wall_of[$i]} s"; tail -n 3 "$OUT_DIR/$name.log" | sed 's/^/   /'
  (( rc == 0 )) || status=1
  if [[ $name == install ]]; then
    "$PY" -c "import sys, numpy, taichi; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'taichi', taichi.__version__)" \
      >>"$OUT_DIR/env.txt" 2>&1
  fi
  write_summary; copy_out
done
echo "== summary ($OUT_DIR/summary.txt$([[ -n $COPY_DIR ]] && echo "; copied to $COPY_DIR"))"
cat "$OUT_DIR/summary.txt"
exit $status
