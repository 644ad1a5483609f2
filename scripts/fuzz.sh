#!/usr/bin/env bash
# Builds the fuzzers with clang (libFuzzer, ASan, UBSan) and runs each for a bounded time from its
# committed seed corpus: the store's wire protocols for the given seconds (default 60), the flight
# recorder's dump reader (default 30 s: DDP_FUZZ_FLIGHT_SECONDS), the two weight-file readers
# (PyTorch's torch.save format, safetensors) for a third of the given seconds each. Exits non-zero
# on any crash or sanitizer report; the crashing input is left in build-fuzz/artifacts/.
#   scripts/fuzz.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
flight_seconds="${DDP_FUZZ_FLIGHT_SECONDS:-30}"
weights_seconds=$(((seconds + 2) / 3))
source scripts/compiler_cache.sh
CXX=clang++ CC=clang cmake -S . -B build-fuzz -G Ninja "${ccache_launcher[@]}" -DDDP_BUILD_FUZZERS=ON -DDDP_BUILD_TORCH=OFF \
  -DDDP_BUILD_BENCH=OFF -DDDP_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build-fuzz store_wire_fuzzer flight_dump_fuzzer pytorch_weights_fuzzer safetensors_fuzzer
mkdir -p build-fuzz/artifacts

# fuzz NAME SECONDS MAX_LEN WHAT: runs build-fuzz/tests/fuzz/NAME_fuzzer on a copy of its corpus.
fuzz() {
  local work="build-fuzz/corpus/$1"
  mkdir -p "$work"
  cp -n "tests/fuzz/corpus/$1"/* "$work"/ 2>/dev/null || true
  echo "== fuzzing $4 for $2 s"
  "build-fuzz/tests/fuzz/$1_fuzzer" -max_total_time="$2" -max_len="$3" -timeout=10 \
    -artifact_prefix=build-fuzz/artifacts/ -print_final_stats=1 "$work"
}
fuzz store_wire "$seconds" 4096 "the store's wire protocols"
fuzz flight_dump "$flight_seconds" 4096 "the flight recorder's dump reader"
fuzz pytorch_weights "$weights_seconds" 8192 "the torch.save readers (zip, legacy, pickle)"
fuzz safetensors "$weights_seconds" 4096 "the safetensors reader"
