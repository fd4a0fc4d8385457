#!/usr/bin/env bash
# Set up everything on a fresh Debian 12 machine, then run the headless acceptance.
#   bash scripts/setup.sh                 # install, then: python -m app --headless (best backend)
#   bash scripts/setup.sh --install-only  # install only (CI)
# Any other arguments are passed to `python -m app --headless`.
set -euo pipefail
cd "$(dirname "$0")/.."

run_headless=1
if [[ "${1:-}" == "--install-only" ]]; then run_headless=0; shift; fi

SUDO=""
if [[ "$(id -u)" != "0" ]]; then SUDO="sudo"; fi

# Vulkan on the CPU (Mesa lavapipe) is the second backend without a GPU; Xvfb and
# Mesa GL/EGL run the desktop app and its tests without a screen.
DEBS=(mesa-vulkan-drivers libvulkan1 vulkan-tools xvfb xauth libgl1 libegl1 libgl1-mesa-dri libglx-mesa0 libegl-mesa0)
DEBS+=(libllvm19)  # Dr.Jit's LLVM backend (`bench invert` peer): Debian 12's default LLVM 15 aborts on its kernels
# 3.11 first (CI's full run); 3.13 is the newest with Taichi 1.7.4 wheels (none for 3.14)
PY="$(command -v python3.11 || command -v python3.12 || command -v python3.13 || command -v python3.10 || command -v python3)"
if ! "$PY" -c 'import sys; assert (3, 10) <= sys.version_info[:2] <= (3, 13)' 2>/dev/null; then
  echo "error: Python 3.10 to 3.13 is required (found $("$PY" --version 2>&1))" >&2; exit 2
fi
if ! "$PY" -m venv --help >/dev/null 2>&1 || ! "$PY" -c 'import ensurepip' 2>/dev/null; then DEBS+=(python3-venv python3-pip); fi
missing=()
for deb in "${DEBS[@]}"; do dpkg -s "$deb" >/dev/null 2>&1 || missing+=("$deb"); done
if (( ${#missing[@]} )); then
  echo "== installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [[ ! -x .venv/bin/python ]]; then "$PY" -m venv .venv; fi
echo "== installing Python packages into .venv"
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e ".[dev,bench,batch]"

if (( run_headless )); then
  echo "== python -m app --headless $*"
  exec .venv/bin/python -m app --headless "$@"
fi
