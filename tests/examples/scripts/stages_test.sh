#!/usr/bin/env bash
# scripts/stages.sh, the stages of scripts/test.sh: a failing CTest stage does not stop the run;
# it ends with each stage's result and time, the failed tests, the main run's summary line, and last
# the whole run's verdict naming the failed stages, and exits non-zero. A run where everything passes
# exits 0.
#   stages_test.sh SOURCE_DIR
set -uo pipefail
source "$(dirname "$0")/checks.sh"
stages="$1/scripts/stages.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# A real CTest project with a passing and a failing test, generated for Ninja as scripts/setup.sh
# does (a machine set up for ddp has ninja-build, not necessarily make).
mkdir "$tmp/project"
cat >"$tmp/project/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(stages NONE)
enable_testing()
add_test(NAME Good.Passes COMMAND true)
add_test(NAME Bad.Fails COMMAND false)
CMAKE
cmake -S "$tmp/project" -B "$tmp/build" -G Ninja >/dev/null || { fail "cannot configure the CTest project"; finish; }

# What scripts/test.sh does, with set -e and pipefail as it has them, and its $0.
run() {
  bash -c 'set -euo pipefail; source "$1"; shift; eval "$1"; finish_stages' scripts/test.sh "$stages" "$1" 2>&1
}
# The main run's summary line: the last but one.
summary_line() { tail -n 2 <<<"$1" | head -n 1; }
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
expect_eq "$(summary_line "$out")" "50% tests passed, 1 tests failed out of 2" "the main run's summary line"
expect_eq "$(tail -n 1 <<<"$out")" \
  "scripts/test.sh: FAILED (3 of 5 stages): all tests, build with ASan, core tests under ASan (not run)" "the last line"
results="${out##*== results}"
expect_contains "$results" "Bad.Fails" "the results, after the CTest output"

# Everything passes: exit 0, the summary, then the verdict.
out="$(run 'ctest_stage "all tests" "'"$tmp"'/ok.log" ctest --test-dir "'"$tmp"'/build" -R Good || true; stage "fuzzing" true || true')"
expect_eq "$?" 0 "exit status of a run that passed"
expect_eq "$(summary_line "$out")" "100% tests passed, 0 tests failed out of 1" "the main run's summary line"
expect_eq "$(tail -n 1 <<<"$out")" "scripts/test.sh: all 2 stages passed" "the last line"
expect_contains "$out" " s (100% tests passed, 0 tests failed out of 1)"

# A main build that fails: the summary line says the tests did not run.
out="$(run 'stage "build" false || skip_stage "all tests" "the build failed"')"
[ "$?" -ne 0 ] || fail "a failed build exited 0"
expect_eq "$(summary_line "$out")" "all tests: not run (the build failed)" "the summary line after a failed build"
expect_eq "$(tail -n 1 <<<"$out")" "scripts/test.sh: FAILED (2 of 2 stages): build, all tests (not run)" \
  "the last line after a failed build"

# Only a later stage fails (a sanitizer run, after a main run that passed): the last line says so,
# not the main run's "100% tests passed".
out="$(run 'ctest_stage "all tests" "'"$tmp"'/ok2.log" ctest --test-dir "'"$tmp"'/build" -R Good || true
  stage "core tests under TSan" false || true')"
[ "$?" -ne 0 ] || fail "a run with a failed later stage exited 0"
expect_eq "$(summary_line "$out")" "100% tests passed, 0 tests failed out of 1" "the main run's summary line"
expect_eq "$(tail -n 1 <<<"$out")" "scripts/test.sh: FAILED (1 of 2 stages): core tests under TSan" \
  "the last line after a later stage failed"

finish
