#!/usr/bin/env bash
# Fill .whl/ (and .whl-warp1..3/) with the wheels a GPU machine that cannot reach PyPI lacks
# (run here, where pip works).
#
# The lent H200 machines have Python 3.12 with numpy, Pillow, imageio, tqdm, scipy and pytest, and
# no network, and each device call carries at most 64 MiB. This fetches the rest of what
# `scripts/gpu_check.sh` needs for that Python: Taichi (pinned, as in pyproject.toml), its dill,
# trimesh and moderngl (a test module imports it) into .whl/ (57 MiB), and Warp, the benchmarks' peer (142 MiB), split into three
# parts in .whl-warp1..3/ that travel in three calls before the check's own (see gpu_check.sh).
# Usage: bash scripts/gpu_wheels.sh [PYTHON_VERSION]   (default 3.12)
set -euo pipefail
cd "$(dirname "$0")/.."
python_version="${1:-3.12}"
WARP=warp-lang==1.19.0  # the version the CPU benchmarks in docs/RESULTS.md ran against
PART_MB=58  # a part plus the repository stays under a call's 64 MiB
rm -rf .whl .whl-warp* && mkdir -p .whl
platforms=()
for p in manylinux_2_35_x86_64 manylinux_2_31_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 \
         manylinux_2_17_x86_64 manylinux2014_x86_64; do platforms+=(--platform "$p"); done
fetch() {  # fetch DIR REQUIREMENT...
  local dir=$1; shift
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$python_version" --implementation cp \
    "${platforms[@]}" -d "$dir" "$@" 2>&1 | grep -v "^WARNING: Location" || true
}
fetch .whl taichi==1.7.4 dill==0.4.1 trimesh==5.2.0 moderngl==5.13.0 glcontext==3.1.0  # moderngl: tests/test_ui_parts.py imports it
warp_dir=$(mktemp -d)
fetch "$warp_dir" "$WARP"
warp_wheel=$(ls "$warp_dir"/*.whl)
split -b "${PART_MB}M" -d -a 1 "$warp_wheel" "$warp_dir/part"
for part in "$warp_dir"/part*; do
  folder=".whl-warp$(( ${part##*part} + 1 ))"
  mkdir -p "$folder" && mv "$part" "$folder/" && basename "$warp_wheel" >"$folder/WHEEL_NAME"
done
rm -rf "$warp_dir"
du -sm .whl .whl-warp*
echo "each folder travels in its own device call: with the repository each stays under 64 MiB"
