#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (CTest) against Debian's LibTorch
# 1.13; builds again against PyPI's LibTorch 2.15 (installed into ddp's cache, reused) and runs the
# torch, example and install tests there; runs the core tests again under AddressSanitizer +
# UndefinedBehaviorSanitizer and under ThreadSanitizer, and fuzzes the readers of outside bytes
# (scripts/fuzz.sh). (scripts/sanitize.sh runs the rest of the suite under the sanitizers: slower,
# not part of every CI run.) Every stage runs even when an earlier one fails; the run ends with each
# stage's result, the failed tests, the main run's summary line, and last the whole run's verdict
# (the stages that failed), and exits non-zero when anything failed. DDP_UPSTREAM_TORCH=2.x.y
# picks another PyPI release for the upstream stages.
#   scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stages.sh
export DDP_BUILD_JOBS="${DDP_BUILD_JOBS:-2}"
core_only=(-DDDP_BUILD_TORCH=OFF -DDDP_BUILD_BENCH=OFF -DDDP_BUILD_EXAMPLES=OFF)

# PyTorch 2.15 from PyPI, into ddp's cache (reused): the second reference peer of the compatibility
# tests, and the upstream LibTorch of the stage after the main run.
stage "PyTorch ${DDP_UPSTREAM_TORCH:-2.15.0} from PyPI" scripts/upstream_torch.sh ${DDP_UPSTREAM_TORCH:-2.15.0} || true

if stage "build" scripts/setup.sh build; then
  ctest_stage "all tests" build/ctest.log ctest --test-dir build -j 2 --output-on-failure --timeout 600 || true
else
  skip_stage "all tests" "the build failed"
fi

# Upstream LibTorch (docs/LIBTORCH.md): the libraries, ddprun, the examples, the torch tests and the
# GPU tests (compiled and linked; no GPU here) against PyPI's LibTorch, with ddp's private Gloo;
# then the torch, example and install tests on the CPU, LibTorch's own Gloo in the same processes.
upstream="LibTorch ${DDP_UPSTREAM_TORCH:-2.15.0}"
upstream_targets=()
for t in ddp_core ddp_torch ddprun ddp_trace train_fashion_mnist allreduce_demo ddp_torch_tests ddp_gloo_torch_tests \
  ddp_torch_gpu_tests ddp_gpu_tests example_tests example_unit_tests; do
  upstream_targets+=(--target "$t")
done
if stage "build against $upstream" scripts/setup.sh --torch "pypi=${DDP_UPSTREAM_TORCH:-2.15.0}" "${upstream_targets[@]}" \
  build-torch2 -DDDP_BUILD_BENCH=OFF; then
  ctest_stage "torch, example and install tests against $upstream" build-torch2/ctest.log \
    ctest --test-dir build-torch2 -L '^(torch|example|install)$' -LE scripts -j 2 --output-on-failure --timeout 600 || true
else
  skip_stage "torch, example and install tests against $upstream" "the build failed"
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

# The C++ style (.clang-format), and the layers' walls (cmake/layers.cmake; every configure above
# checked them too, this names a crossing without a build).
stage "format" scripts/format.sh || true
stage "layers" cmake -DDDP_ROOT="$PWD" -P cmake/layers.cmake || true

finish_stages
