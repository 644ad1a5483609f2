#!/usr/bin/env bash
# Installs what ddp needs on Debian 12 (only what is missing), then configures and builds it: all
# of it, or the targets named with --target (the quickstart builds only ddprun and the example).
# A build folder that is configured already is configured again only when cmake args are given
# (ninja itself reruns CMake when a CMakeLists.txt changes).
#   scripts/setup.sh [--target NAME]... [build-dir] [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  cmake ninja-build g++ pkg-config
  libtorch-dev libopenblas0-openmp   # LibTorch 1.13 (CPU) and the BLAS that makes it fast
  libgloo-dev                        # the gloo backend
  zlib1g-dev                         # reading the gzip'd IDX files
  libzip-dev                         # PyTorch's zip format for state dicts (ddp::save_state_dict)
  dataset-fashion-mnist              # the main job's data set
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-torch                      # PyTorch 1.13: the reference peer of the compatibility tests and benchmarks
  clang libclang-rt-14-dev           # the store protocol fuzzer (libFuzzer)
  iproute2 procps                    # network namespaces for multi-node tests; ps/pkill
)

targets=()
while [ "${1:-}" = --target ]; do
  targets+=("${2:?--target needs a target name}")
  shift 2
done
BUILD="${1:-build}"
shift || true

scripts/install_packages.sh "${PACKAGES[@]}"

if [ ! -f "$BUILD/build.ninja" ] || (($#)); then
  echo "setup: configuring $BUILD"
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
fi
echo "setup: building ${targets[*]:-everything} in $BUILD"
# DDP_BUILD_JOBS: parallel jobs (default one per core); a LibTorch translation unit needs about 1 GB and 20 s.
ninja -C "$BUILD" -j "${DDP_BUILD_JOBS:-$(nproc)}" "${targets[@]}"
