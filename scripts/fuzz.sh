#!/usr/bin/env bash
# Builds the store protocol fuzzer with clang (libFuzzer, ASan, UBSan) and runs it for a bounded
# time (default 60 s) from the committed seed corpus, then the flight recorder's dump reader
# fuzzer (default 30 s: DDP_FUZZ_FLIGHT_SECONDS). Exits non-zero on any crash or sanitizer
# report; the crashing input is left in build-fuzz/artifacts/.
#   scripts/fuzz.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
CXX=clang++ CC=clang cmake -S . -B build-fuzz -G Ninja -DDDP_BUILD_FUZZERS=ON -DDDP_BUILD_TORCH=OFF \
  -DDDP_BUILD_BENCH=OFF -DDDP_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build-fuzz store_wire_fuzzer flight_dump_fuzzer
work=build-fuzz/corpus
mkdir -p "$work" build-fuzz/artifacts
cp -n tests/fuzz/corpus/store_wire/* "$work"/ 2>/dev/null || true
echo "== fuzzing the store's wire protocols for ${seconds} s"
build-fuzz/tests/fuzz/store_wire_fuzzer -max_total_time="$seconds" -max_len=4096 -timeout=10 \
  -artifact_prefix=build-fuzz/artifacts/ -print_final_stats=1 "$work"

flight_seconds="${DDP_FUZZ_FLIGHT_SECONDS:-30}"
flight_work=build-fuzz/corpus-flight
mkdir -p "$flight_work"
cp -n tests/fuzz/corpus/flight_dump/* "$flight_work"/ 2>/dev/null || true
echo "== fuzzing the flight recorder's dump reader for ${flight_seconds} s"
build-fuzz/tests/fuzz/flight_dump_fuzzer -max_total_time="$flight_seconds" -max_len=4096 -timeout=10 \
  -artifact_prefix=build-fuzz/artifacts/ -print_final_stats=1 "$flight_work"
