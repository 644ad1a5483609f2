#!/usr/bin/env bash
# Installs what ddp needs on Debian 12 (only what is missing), then configures and builds it.
#   scripts/setup.sh [build-dir] [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  cmake ninja-build g++ pkg-config
  libtorch-dev libopenblas0-openmp   # LibTorch 1.13 (CPU) and the BLAS that makes it fast
  libgloo-dev                        # the gloo backend
  zlib1g-dev                         # reading the gzip'd IDX files
  dataset-fashion-mnist              # the main job's data set
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-torch                      # PyTorch 1.13: the reference peer of the compatibility tests and benchmarks
  clang libclang-rt-14-dev           # the store protocol fuzzer (libFuzzer)
  iproute2 procps                    # network namespaces for multi-node tests; ps/pkill
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

BUILD="${1:-build}"
shift || true
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
# Two jobs: a LibTorch translation unit needs about 1 GB and 20 s; more would only thrash a small machine.
ninja -C "$BUILD" -j "${DDP_BUILD_JOBS:-$(nproc)}"
