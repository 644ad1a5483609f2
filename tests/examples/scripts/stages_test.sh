#!/usr/bin/env bash
# scripts/stages.sh, the stages of scripts/test.sh: a failing CTest stage does not stop the run;
# it ends with each stage's result and time, the failed tests, and the main run's summary line last, and
# exits non-zero. A run where everything passes exits 0.
#   stages_test.sh SOURCE_DIR
set -uo pipefail
source "$(dirname "$0")/checks.sh"
stages="$1/scripts/stages.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# A real CTest project with a passing and a failing test.
mkdir "$tmp/project"
cat >"$tmp/project/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(stages NONE)
enable_testing()
add_test(NAME Good.Passes COMMAND true)
add_test(NAME Bad.Fails COMMAND false)
CMAKE
cmake -S "$tmp/project" -B "$tmp/build" >/dev/null || { fail "cannot configure the CTest project"; finish; }

# What scripts/test.sh does, with set -e and pipefail as it has them.
run() {
  bash -c 'set -euo pipefail; source "$1"; shift; eval "$1"; finish_stages' _ "$stages" "$1" 2>&1
}
out="$(run '
  if stage "build" true; then
    ctest_stage "all tests" "'"$tmp"'/ctest.log" ctest --test-dir "'"$tmp"'/build" || true
  else skip_stage "all tests" "the build failed"; fi
  if stage "build with ASan" false; then ctest_stage "asan" /dev/null true || true
  else skip_stage "core tests under ASan" "the build failed"; fi
  stage "fuzzing" true || true')"
status=$?
[ "$status" -ne 0 ] || fail "a failed run exited 0"
expect_contains "$out" "== fuzzing" "the stages after the failure"
expect_contains "$out" "all tests: FAILED after 0 min 0" "how long the stage took"
expect_contains "$out" " s (50% tests passed, 1 tests failed out of 2; log: $tmp/ctest.log)"
expect_contains "$out" $'\n    2 - Bad.Fails (Failed)\n' "the list of failed tests"
expect_contains "$out" "build with ASan: FAILED (exit status 1) after 0 min 0"
expect_contains "$out" "core tests under ASan: NOT RUN (the build failed)"
expect_contains "$out" "fuzzing: passed in 0 min 0"
expect_contains "$out" "== results (0 min 0" "the whole run's time"
expect_eq "$(tail -n 1 <<<"$out")" "50% tests passed, 1 tests failed out of 2" "the last line"
results="${out##*== results}"
expect_contains "$results" "Bad.Fails" "the results, after the CTest output"

# Everything passes: exit 0, the summary last.
out="$(run 'ctest_stage "all tests" "'"$tmp"'/ok.log" ctest --test-dir "'"$tmp"'/build" -R Good || true; stage "fuzzing" true || true')"
expect_eq "$?" 0 "exit status of a run that passed"
expect_eq "$(tail -n 1 <<<"$out")" "100% tests passed, 0 tests failed out of 1" "the last line"
expect_contains "$out" " s (100% tests passed, 0 tests failed out of 1)"

# A main build that fails: the last line says the tests did not run.
out="$(run 'stage "build" false || skip_stage "all tests" "the build failed"')"
[ "$?" -ne 0 ] || fail "a failed build exited 0"
expect_eq "$(tail -n 1 <<<"$out")" "all tests: not run (the build failed)" "the last line after a failed build"

finish
