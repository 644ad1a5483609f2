#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (CTest), then the core tests
# again under AddressSanitizer + UndefinedBehaviorSanitizer and under ThreadSanitizer, and the
# store protocol fuzzer for a minute. (scripts/sanitize.sh runs the rest of the suite under the
# sanitizers: slower, not part of every CI run.) Every stage runs even when an earlier one fails;
# the run ends with each stage's result, the failed tests, and the main run's summary line, and
# exits non-zero when anything failed.
#   scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stages.sh
export DDP_BUILD_JOBS="${DDP_BUILD_JOBS:-2}"
core_only=(-DDDP_BUILD_TORCH=OFF -DDDP_BUILD_BENCH=OFF -DDDP_BUILD_EXAMPLES=OFF)

if stage "build" scripts/setup.sh build; then
  ctest_stage "all tests" build/ctest.log ctest --test-dir build -j 2 --output-on-failure --timeout 600 || true
else
  skip_stage "all tests" "the build failed"
fi

# The sanitizer runs build only what they run: the core tests.
if stage "build with ASan+UBSan" scripts/setup.sh --target ddp_core_tests build-asan -DDDP_SANITIZE=address,undefined "${core_only[@]}"; then
  ctest_stage "core tests under ASan+UBSan" build-asan/ctest.log \
    env ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan -L core -j 2 --output-on-failure --timeout 600 || true
else
  skip_stage "core tests under ASan+UBSan" "the build failed"
fi

# ThreadSanitizer looks for races between the threads of one process, which world sizes 1 and 2
# exercise as well as 5; the larger worlds of the two big collective suites, 5 to 10 times slower
# under TSan, run in the plain and ASan runs only.
if stage "build with TSan" scripts/setup.sh --target ddp_core_tests build-tsan -DDDP_SANITIZE=thread "${core_only[@]}"; then
  ctest_stage "core tests under TSan" build-tsan/ctest.log \
    env TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/tsan.supp" \
    ctest --test-dir build-tsan -L core -E "$(cat tests/tsan_skip.regex)" -j 2 --output-on-failure --timeout 900 || true
else
  skip_stage "core tests under TSan" "the build failed"
fi

stage "fuzzing" scripts/fuzz.sh 60 || true

finish_stages
