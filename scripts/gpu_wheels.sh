#!/usr/bin/env bash
# Fill .whl/ with the wheels a GPU machine that cannot reach PyPI lacks (run here, where pip works).
#
# The lent H200 machines have Python 3.12 with numpy, Pillow, imageio, tqdm, scipy and pytest, and
# no network; this fetches the rest of what `scripts/gpu_check.sh` needs for that Python: Taichi
# (pinned, as in pyproject.toml), its dill, and trimesh. Warp's wheel (149 MB) does not fit the
# machine's 64 MiB transfer limit, so the benchmarks there time our side only.
# Usage: bash scripts/gpu_wheels.sh [PYTHON_VERSION]   (default 3.12)
set -euo pipefail
cd "$(dirname "$0")/.."
python_version="${1:-3.12}"
rm -rf .whl && mkdir -p .whl
platforms=()
for p in manylinux_2_35_x86_64 manylinux_2_31_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 \
         manylinux_2_17_x86_64 manylinux2014_x86_64; do platforms+=(--platform "$p"); done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$python_version" --implementation cp \
  "${platforms[@]}" -d .whl taichi==1.7.4 dill==0.4.1 trimesh==5.2.0 2>&1 | grep -v "^WARNING: Location" || true
ls -la .whl
echo "total: $(du -sm .whl | cut -f1) MiB (with the repository, keep it under the 64 MiB a device call carries)"
