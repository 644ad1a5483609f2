#!/usr/bin/env bash
# The slower sanitizer runs (docs/RELIABILITY.md): the whole multi-process suite (core, LibTorch
# front, launcher) under AddressSanitizer + UndefinedBehaviorSanitizer, and the core and DDP
# tests under ThreadSanitizer. LibTorch, Gloo and OpenMP are not built with the sanitizers: their
# insides are not checked, only ddp's code and how it uses them.
#   scripts/sanitize.sh            # both
#   scripts/sanitize.sh asan|tsan  # one
set -euo pipefail
cd "$(dirname "$0")/.."
export DDP_BUILD_JOBS="${DDP_BUILD_JOBS:-2}"
what="${1:-all}"
no_extras=(-DDDP_BUILD_BENCH=OFF -DDDP_BUILD_EXAMPLES=OFF)

if [[ "$what" == all || "$what" == asan ]]; then
  scripts/setup.sh build-asan-full -DDDP_SANITIZE=address,undefined "${no_extras[@]}"
  echo "== the multi-process suite under ASan+UBSan"
  # LeakSanitizer is off for the LibTorch tests: LibTorch keeps global allocations for the life
  # of the process, which it reports at exit. The core tests run with it in scripts/test.sh.
  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan-full -L "core|torch|launcher" -j 2 --output-on-failure --timeout 900
fi

if [[ "$what" == all || "$what" == tsan ]]; then
  scripts/setup.sh build-tsan-full -DDDP_SANITIZE=thread "${no_extras[@]}"
  echo "== core and DDP tests under TSan"
  export TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/tsan.supp"
  ctest --test-dir build-tsan-full -L core -E "$(cat tests/tsan_skip.regex)" -j 2 --output-on-failure --timeout 900
  ctest --test-dir build-tsan-full -L torch -R "Ddp|BucketPlan|Readiness|TensorCollectives" -j 2 \
    --output-on-failure --timeout 900
fi
