#!/usr/bin/env bash
# The built wheel, as a newcomer meets it, on the Pythons CI does not run the suite on: 3.12 (the GPU
# machines') and 3.13 (the newest Taichi 1.7.4 has wheels for).
#
# Builds the wheel once; then, for each Python in turn, installs it (not editable) into a fresh venv,
# and from an empty folder (so that nothing resolves to this checkout) runs `shannon --version`,
# `python -m app --version` and `python -m app fit --target spot` (the bundled meshes are package
# data), then, with that venv's Python, the README's Python snippets (tests/test_readme.py: each runs
# from an empty folder, so against the wheel) and a fast subset of the suite (those import this
# checkout's code: they check it on that Python). Between the two, a second project with its own
# top-level `app` and `engine` is installed beside it and removed again: ours keeps working through
# `shannon`, theirs is what `import app` gives everyone else, and removing it leaves our files alone.
# The venvs are installed side by side in the background while the first Python's checks run, and
# share pip's cache (the user's, as every venv does). Each Python is checked even when another
# failed; it ends with a line per Python (passed or FAILED, with the seconds from when its check
# began, the wait for its install included) and exits 1 if any failed. About a minute per Python
# with warm caches.
#   bash scripts/wheel_check.sh               # Pythons 3.12 and 3.13: pyenv's when pyenv has them, else python3.X
#   bash scripts/wheel_check.sh PYTHON...     # these interpreters instead
# A Python it cannot find is one line and skipped, or, in CI (CI=true), exit 2 before anything runs.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
VERSIONS=(3.12 3.13)
SUBSET=(tests/test_readme.py tests/test_backend.py tests/test_taichi_contract.py tests/test_taichi_internals.py
        tests/test_mesh_io.py tests/test_meshgen.py tests/test_affine.py tests/test_ui_parts.py)

find_python() {  # $1 = 3.X: pyenv's newest 3.X.*, else python3.X on PATH, else nothing
  local version=""
  if command -v pyenv >/dev/null; then
    version=$(pyenv versions --bare 2>/dev/null | grep -E "^${1//./\\.}(\.[0-9]+)?$" | sort -V | tail -1 || true)
  fi
  if [[ -n "$version" ]]; then echo "$(pyenv root)/versions/$version/bin/python"; else command -v "python$1" || true; fi
}

pythons=("$@")
if (( ! ${#pythons[@]} )); then
  for v in "${VERSIONS[@]}"; do
    py=$(find_python "$v")
    if [[ -n "$py" ]]; then pythons+=("$py"); continue; fi
    if [[ "${CI:-}" == "true" ]]; then
      echo "error: wheel check: no Python $v here (pyenv install $v, or pass interpreters)" >&2; exit 2
    fi
    echo "wheel check: skipping Python $v, not found here (pass interpreters: bash scripts/wheel_check.sh PYTHON...)"
  done
  if (( ! ${#pythons[@]} )); then echo "wheel check skipped: none of Python ${VERSIONS[*]} here"; exit 0; fi
fi

quiet_pip() {  # run pip quietly, without this machine's notes on missing local indexes; keep its exit status
  local out status=0
  out=$("$@" 2>&1) || status=$?
  [[ -z "$out" ]] || grep -v "^WARNING: Location" <<<"$out" || true
  return "$status"
}

work=$(mktemp -d)
trap 'wait; rm -rf "$work"' EXIT  # wait: an install still running in the background
builder=".venv/bin/python"; [[ -x "$builder" ]] || builder="${pythons[0]}"
echo "== building the wheel"
quiet_pip "$builder" -m pip wheel -q --no-deps -w "$work/dist" .
wheel=$(ls "$work"/dist/shannon_autograd-*.whl)

install_one() {  # $1 = a Python; $2 = its folder under $work: a fresh venv there with the wheel and pytest
  local py=$1 dir=$2
  echo "== installing $(basename "$wheel") into a fresh $("$py" --version 2>&1) venv"
  "$py" -m venv "$dir/venv"
  quiet_pip "$dir/venv/bin/python" -m pip install -q "$wheel[dev]"
}

check_one() {  # $1 = a Python; $2 = its folder under $work, its venv installed. Runs under set -e in a subshell.
  local py=$1 dir=$2 venv="$2/venv"
  mkdir "$dir/empty" && cd "$dir/empty"
  "$venv/bin/shannon" --version
  "$venv/bin/python" -m app --version
  "$venv/bin/python" -m app fit --target spot --arch cpu --out fit
  test -s fit/final.obj && test -s fit/fit.json

  echo "== another project's top-level app and engine beside ours: neither install touches the other's files"
  local other="$dir/other"
  mkdir -p "$other/app" "$other/engine"
  echo 'WHO = "other"' >"$other/app/__init__.py"
  echo 'WHO = "other"' >"$other/engine/__init__.py"
  printf '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n[project]\nname = "other-app"\nversion = "1"\n[tool.hatch.build.targets.wheel]\npackages = ["app", "engine"]\n' >"$other/pyproject.toml"
  quiet_pip "$venv/bin/python" -m pip install -q "$other"
  "$venv/bin/python" -c "import app, engine; assert app.WHO == engine.WHO == 'other'"  # theirs, for everyone else
  "$venv/bin/shannon" fit --target spot --iters 5 --arch cpu --out fit-beside-other  # ours, for shannon
  "$venv/bin/python" -m pip uninstall -q -y other-app
  "$venv/bin/python" -m app --version  # ours again, every file still there

  cd "$root"
  echo "== the README's snippets (against the wheel) and a fast subset on $("$py" --version)"
  "$venv/bin/python" -m pytest -q -p no:cacheprovider "${SUBSET[@]}"
}

# Every venv is installed at once, in the background (mostly downloads and unpacking), while the
# first Python's checks run; the checks themselves (Taichi compiles, the CPU backend) run one at a time.
installs=()
for i in "${!pythons[@]}"; do
  mkdir -p "$work/py$i"
  (set -e; install_one "${pythons[$i]}" "$work/py$i") >"$work/py$i/install.log" 2>&1 &
  installs+=($!)
done

summary=() failed=0
for i in "${!pythons[@]}"; do
  py=${pythons[$i]} start=$SECONDS status=0
  wait "${installs[$i]}" || status=$?
  cat "$work/py$i/install.log"
  name=$("$py" --version 2>&1) || { summary+=("$py: FAILED (cannot run it)"); failed=1; continue; }
  if (( status )); then summary+=("$name: FAILED (installing, exit $status)"); failed=1; continue; fi
  set +e
  (set -e; check_one "$py" "$work/py$i")
  status=$?
  set -e
  if (( status )); then summary+=("$name: FAILED (exit $status), $((SECONDS - start)) s"); failed=1
  else summary+=("$name: passed, $((SECONDS - start)) s"); fi
done
echo "== wheel check"
printf '  %s\n' "${summary[@]}"
exit "$failed"
