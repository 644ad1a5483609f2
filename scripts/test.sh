#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (CTest), then the core tests
# again under AddressSanitizer and UndefinedBehaviorSanitizer.
#   scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export DDP_BUILD_JOBS="${DDP_BUILD_JOBS:-2}"

scripts/setup.sh build
scripts/setup.sh build-asan -DDDP_SANITIZE=address,undefined -DDDP_BUILD_TORCH=OFF -DDDP_BUILD_BENCH=OFF \
  -DDDP_BUILD_EXAMPLES=OFF

echo "== core tests under ASan+UBSan"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan -L core -j 2 --output-on-failure --timeout 300

echo "== all tests"
ctest --test-dir build -j 2 --output-on-failure --timeout 300
