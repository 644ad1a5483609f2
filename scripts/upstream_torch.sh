#!/usr/bin/env bash
# Installs PyPI's PyTorch (the LibTorch most users download: a CUDA build, about 3 GB with its
# nvidia-* wheels) and safetensors into a virtual environment in ddp's cache, outside the checkout,
# and reuses it when it is there. Prints, last, the environment's python; LibTorch's CMake files
# are at `$python -c 'import torch; print(torch.utils.cmake_prefix_path)'`.
#   scripts/upstream_torch.sh [VERSION]     # default 2.15.0, the newest release tested
# DDP_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/ddp) says where the cache is.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:-2.15.0}"
cache="${DDP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ddp}"
venv="$cache/torch-$version"
python="$venv/bin/python"

ready() { [ -x "$python" ] && "$python" -c "import torch; assert torch.__version__.split('+')[0] == '$version'" 2>/dev/null; }
# pip's own progress bars only on a terminal; in a log, one line per package.
progress=()
[ -t 1 ] || progress=(--progress-bar off)

if ! ready; then
  mkdir -p "$cache"
  # A Python that can make environments: the first python3 on PATH, else Debian's (which needs
  # python3-venv for ensurepip).
  maker=""
  for candidate in python3 /usr/bin/python3; do
    command -v "$candidate" >/dev/null 2>&1 || continue
    if "$candidate" -c 'import ensurepip, venv' 2>/dev/null; then maker="$candidate"; break; fi
  done
  if [ -z "$maker" ]; then
    scripts/install_packages.sh python3-venv
    maker=/usr/bin/python3
  fi
  scripts/install_packages.sh ca-certificates  # the system's trust store, for machines whose pip is set to use it
  echo "upstream_torch: installing torch==$version from PyPI into $venv (about 3 GB, once; reused after)"
  rm -rf "$venv.partial"
  "$maker" -m venv "$venv.partial"
  "$venv.partial/bin/python" -m pip install --no-cache-dir "${progress[@]}" "torch==$version"
  # Moved into place only once complete: an interrupted install starts again, never half-used.
  # Its scripts name the folder they were made in: renamed with it.
  rm -rf "$venv"
  mv "$venv.partial" "$venv"
  sed -i "s#$venv.partial#$venv#g" "$venv"/bin/* 2>/dev/null || true
  ready || { echo "upstream_torch: $python cannot import torch $version after the install" >&2; exit 1; }
fi
# The peers of the compatibility tests also write safetensors (and torch wants numpy for it).
"$python" -c 'import safetensors, numpy' 2>/dev/null ||
  "$python" -m pip install --no-cache-dir "${progress[@]}" safetensors numpy
echo "$python"
