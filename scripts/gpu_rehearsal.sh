#!/usr/bin/env bash
# The GPU check rehearsed without a GPU (docs/NCCL.md), in a fresh Debian root that holds only what
# the lent GPU machine has: a Python with a CUDA build of PyTorch (PyPI's, from ddp's cache,
# mounted read-only), the CUDA toolkit (mounted), CMake, ninja and a compiler; no gloo, GoogleTest,
# libzip, zlib headers or data set: those come from the bundle made here. The check then runs every
# phase up to the first that needs a GPU: the bundle, GoogleTest from it, configure and the build.
#   scripts/gpu_rehearsal.sh [DIR]     # the root; default ${DDP_CACHE:-~/.cache/ddp}/gpu-root
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${DDP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ddp}"
python="$(scripts/upstream_torch.sh | tail -n 1)"
venv="$(dirname "$(dirname "$python")")"
# The interpreter the environment was made from (its standard library; a venv's python may be a
# copy of it rather than a link): pyvenv.cfg's `home` is its bin folder.
home="$(sed -n 's/^home *= *//p' "$venv/pyvenv.cfg")"
base="$(dirname "$(readlink -f "${home:-$(dirname "$(readlink -f "$python")")}")")"
scripts/gpu_check.sh --bundle gpu-bundle
FRESH_ROOT_PACKAGES="cmake ninja-build g++ ca-certificates" FRESH_ROOT_MOUNTS="$venv $base" FRESH_ROOT_COPY=gpu-bundle \
  scripts/fresh_root.sh "${1:-$cache/gpu-root}" \
  "GPU_CHECK_REHEARSAL=1 GPU_CHECK_BUDGET=${GPU_CHECK_BUDGET:-5400} PYTHON=$python scripts/gpu_check.sh"
