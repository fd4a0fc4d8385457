#!/usr/bin/env bash
# The built wheel, as a newcomer meets it, on a second Python (default 3.12, the GPU machines').
#
# Builds the wheel, installs it (not editable) into a fresh venv, and from an empty folder (so that
# nothing resolves to this checkout) runs `shannon --version`, `python -m app --version` and
# `python -m app fit --target spot` (the bundled meshes are package data), then, with that venv's
# Python, the README's Python snippets (tests/test_readme.py: each runs from an empty folder, so
# against the wheel) and a fast subset of the suite (those import this checkout's code: they check
# it on that Python). Between the two, a second project with its own top-level `app` and `engine` is
# installed beside it and removed again: ours keeps working through `shannon`, theirs is what
# `import app` gives everyone else, and removing it leaves our files alone. About a minute with warm caches.
#   bash scripts/wheel_check.sh            # Python 3.12: pyenv's when pyenv is there, else python3.12
#   bash scripts/wheel_check.sh PYTHON     # any other interpreter
# Without a Python 3.12 it says so and exits 0, or, in CI (CI=true), exits 2.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
SUBSET=(tests/test_readme.py tests/test_backend.py tests/test_taichi_contract.py tests/test_taichi_internals.py
        tests/test_mesh_io.py tests/test_meshgen.py tests/test_affine.py tests/test_ui_parts.py)

py="${1:-}"
if [[ -z "$py" ]] && command -v pyenv >/dev/null; then
  version=$(pyenv versions --bare 2>/dev/null | grep -E '^3\.12(\.[0-9]+)?$' | sort -V | tail -1 || true)
  [[ -n "$version" ]] && py="$(pyenv root)/versions/$version/bin/python"
fi
py="${py:-$(command -v python3.12 || true)}"
if [[ -z "$py" ]]; then
  if [[ "${CI:-}" == "true" ]]; then
    echo "error: wheel check: no Python 3.12 here (pyenv install 3.12, or pass an interpreter)" >&2; exit 2
  fi
  echo "wheel check skipped: no Python 3.12 here (pass an interpreter: bash scripts/wheel_check.sh PYTHON)"; exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
builder=".venv/bin/python"; [[ -x "$builder" ]] || builder="$py"
echo "== building the wheel"
"$builder" -m pip wheel -q --no-deps -w "$work/dist" . 2>&1 | grep -v "^WARNING: Location" || true
wheel=$(ls "$work"/dist/shannon_autograd-*.whl)
echo "== installing $(basename "$wheel") into a fresh $("$py" --version) venv"
"$py" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "$wheel[dev]" 2>&1 | grep -v "^WARNING: Location" || true

mkdir "$work/empty" && cd "$work/empty"
"$work/venv/bin/shannon" --version
"$work/venv/bin/python" -m app --version
"$work/venv/bin/python" -m app fit --target spot --arch cpu --out fit
test -s fit/final.obj && test -s fit/fit.json

echo "== another project's top-level app and engine beside ours: neither install touches the other's files"
other="$work/other"
mkdir -p "$other/app" "$other/engine"
echo 'WHO = "other"' >"$other/app/__init__.py"
echo 'WHO = "other"' >"$other/engine/__init__.py"
printf '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n[project]\nname = "other-app"\nversion = "1"\n[tool.hatch.build.targets.wheel]\npackages = ["app", "engine"]\n' >"$other/pyproject.toml"
"$work/venv/bin/python" -m pip install -q "$other" 2>&1 | grep -v "^WARNING: Location" || true
"$work/venv/bin/python" -c "import app, engine; assert app.WHO == engine.WHO == 'other'"  # theirs, for everyone else
"$work/venv/bin/shannon" fit --target spot --iters 5 --arch cpu --out fit-beside-other  # ours, for shannon
"$work/venv/bin/python" -m pip uninstall -q -y other-app
"$work/venv/bin/python" -m app --version  # ours again, every file still there

cd "$root"
echo "== the README's snippets (against the wheel) and a fast subset on $("$py" --version)"
"$work/venv/bin/python" -m pytest -q -p no:cacheprovider "${SUBSET[@]}"
