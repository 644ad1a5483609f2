#!/usr/bin/env bash
# Installs what ddp needs on Debian 12 (only what is missing), then configures and builds it: all
# of it, or the targets named with --target (the quickstart builds only ddprun and the example).
# A build folder that is configured already is configured again only when cmake args are given
# (ninja itself reruns CMake when a CMakeLists.txt changes).
#   scripts/setup.sh [--torch pypi[=VERSION] | --torch DIR] [--target NAME]... [build-dir] [extra cmake args...]
# --torch builds against another LibTorch than Debian's 1.13 (docs/LIBTORCH.md): `pypi` installs
# PyPI's torch (default 2.15.0) into ddp's cache (scripts/upstream_torch.sh) and uses its LibTorch;
# DIR is an unpacked LibTorch zip (the folder with share/cmake/Torch). Every build compiles ddp's
# own Gloo (scripts/private_gloo.sh fetches its source, once): an upstream LibTorch carries a Gloo
# of its own, and Debian's libgloo lacks a fix ddp needs (docs/GLOO.md).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  cmake ninja-build g++ pkg-config
  ccache                             # the compiler cache (scripts/compiler_cache.sh)
  libtorch-dev libopenblas0-openmp   # LibTorch 1.13 (CPU) and the BLAS that makes it fast
  libgloo-dev                        # Gloo's headers for a build without its source (docs/GLOO.md)
  zlib1g-dev                         # reading the gzip'd IDX files
  libzip-dev                         # PyTorch's zip format for state dicts (ddp::save_state_dict)
  dataset-fashion-mnist              # the main job's data set
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-torch                      # PyTorch 1.13: the reference peer of the compatibility tests and benchmarks
  clang libclang-rt-14-dev           # the store protocol fuzzer (libFuzzer)
  clang-format                       # the C++ style (.clang-format, scripts/format.sh)
  iproute2 procps                    # network namespaces for multi-node tests; ps/pkill
)

targets=()
torch=""
while :; do
  case "${1:-}" in
    --target) targets+=("${2:?--target needs a target name}"); shift 2 ;;
    --torch) torch="${2:?--torch needs pypi, pypi=VERSION or a LibTorch folder}"; shift 2 ;;
    --torch=*) torch="${1#--torch=}"; shift ;;
    *) break ;;
  esac
done
BUILD="${1:-build}"
shift || true

scripts/install_packages.sh "${PACKAGES[@]}"

upstream=()
if [ -n "$torch" ]; then
  case "$torch" in
    pypi) prefix="$("$(scripts/upstream_torch.sh | tail -n 1)" -c 'import torch; print(torch.utils.cmake_prefix_path)')" ;;
    pypi=*) prefix="$("$(scripts/upstream_torch.sh "${torch#pypi=}" | tail -n 1)" -c 'import torch; print(torch.utils.cmake_prefix_path)')" ;;
    *)
      prefix="$(cd "$torch" && pwd)"
      [ -d "$prefix/share/cmake/Torch" ] || {
        echo "setup: $torch is not an unpacked LibTorch: it has no share/cmake/Torch (use the folder the zip unpacks to, 'libtorch')" >&2
        exit 2
      }
      ;;
  esac
  # A CUDA LibTorch's CMake files need the CUDA toolkit (they look for nvcc).
  if [ -n "$(ls "$prefix"/../../lib/libtorch_cuda.so "$prefix"/lib/libtorch_cuda.so 2>/dev/null)" ]; then
    cuda="${CUDA_HOME:-/usr/local/cuda}"
    [ -x "$cuda/bin/nvcc" ] || {
      echo "setup: the LibTorch at $prefix is a CUDA build, whose CMake files need the CUDA toolkit (nvcc), and" >&2
      echo "  $cuda/bin/nvcc is missing: install the toolkit there, or set CUDA_HOME to where it is" >&2
      exit 2
    }
    export PATH="$cuda/bin:$PATH"
  fi
  upstream=("-DCMAKE_PREFIX_PATH=$prefix")
fi
gloo_source="$(scripts/private_gloo.sh | tail -n 1)"
source scripts/compiler_cache.sh

if [ ! -f "$BUILD/build.ninja" ] || (($#)) || ((${#upstream[@]})); then
  echo "setup: configuring $BUILD"
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DDDP_GLOO_SOURCE_DIR=$gloo_source" \
    "${ccache_launcher[@]}" "${upstream[@]}" "$@" >/dev/null
fi
echo "setup: building ${targets[*]:-everything} in $BUILD"
# DDP_BUILD_JOBS: parallel jobs (default one per core); a LibTorch translation unit needs about 1 GB and 20 s.
ninja -C "$BUILD" -j "${DDP_BUILD_JOBS:-$(nproc)}" "${targets[@]}"
