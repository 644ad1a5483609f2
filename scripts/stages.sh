# The stages of a test run (sourced by scripts/test.sh): each stage runs even when an earlier one
# failed (a failed build skips only the tests of that build), and the run ends with every stage's
# result and time, the tests that failed, the main CTest run's summary line, and last the whole
# run's verdict (a sanitizer stage's failure must not hide behind the main run's summary);
# finish_stages returns non-zero when anything failed or was skipped.
#
#   source scripts/stages.sh
#   stage "build" scripts/setup.sh build &&
#     ctest_stage "all tests" build/ctest.log ctest --test-dir build || skip_stage "all tests" "its build failed"
#   finish_stages

_stage_lines=()     # one result line per stage, in order
_stage_count=0
_stage_failures=()  # the names of the stages that failed or did not run, in order
_main_summary=""    # the first CTest stage's summary line

# How long a stage took, from bash's SECONDS at its start: "3 min 05 s".
_took() {
  local s=$((SECONDS - $1))
  printf '%d min %02d s' $((s / 60)) $((s % 60))
}

# stage NAME COMMAND...: runs COMMAND; returns its status.
stage() {
  local name="$1"
  shift
  echo "== $name"
  local status=0 start=$SECONDS
  "$@" || status=$?
  _stage_count=$((_stage_count + 1))
  if ((status == 0)); then
    _stage_lines+=("$name: passed in $(_took "$start")")
  else
    _stage_lines+=("$name: FAILED (exit status $status) after $(_took "$start")")
    _stage_failures+=("$name")
  fi
  return "$status"
}

# ctest_stage NAME LOG COMMAND...: runs a CTest COMMAND with its output on screen and in LOG;
# the result line gets CTest's summary and the failed tests.
ctest_stage() {
  local name="$1" log="$2"
  shift 2
  echo "== $name"
  local status=0 start=$SECONDS
  "$@" 2>&1 | tee "$log" || status=$?  # CTest's status (pipefail: tee does not fail)
  local summary
  summary="$(grep -E "tests passed, [0-9]+ tests failed out of" "$log" | tail -n 1 || true)"
  [ -n "$_main_summary" ] || _main_summary="${summary:-$name: no CTest summary (see $log)}"
  _stage_count=$((_stage_count + 1))
  if ((status == 0)); then
    _stage_lines+=("$name: passed in $(_took "$start") (${summary:-no summary})")
  else
    _stage_lines+=("$name: FAILED after $(_took "$start") (${summary:-exit status $status}; log: $log)")
    # CTest lists them after "The following tests FAILED:", one a line, indented.
    local failed
    failed="$(awk '/^The following tests FAILED:/ {on = 1; next} on && /^[ \t]/ {sub(/^[ \t]+/, ""); print "    " $0; next} {on = 0}' "$log")"
    [ -z "$failed" ] || _stage_lines+=("$failed")
    _stage_failures+=("$name")
  fi
  return "$status"
}

# skip_stage NAME REASON: a stage that could not run counts as a failure.
skip_stage() {
  _stage_lines+=("$1: NOT RUN ($2)")
  _stage_count=$((_stage_count + 1))
  _stage_failures+=("$1 (not run)")
  [ -n "$_main_summary" ] || _main_summary="$1: not run ($2)"
  return 0
}

# finish_stages: the results, then the verdict as the last line, named after the script that
# sourced this file ($0): "scripts/test.sh: all N stages passed", or which stages failed.
finish_stages() {
  echo "== results ($(_took 0) in all)"
  printf '%s\n' "${_stage_lines[@]}"
  [ -z "$_main_summary" ] || echo "$_main_summary"
  if ((${#_stage_failures[@]} == 0)); then
    echo "$0: all $_stage_count stages passed"
    return 0
  fi
  local names
  names="$(printf '%s, ' "${_stage_failures[@]}")"
  echo "$0: FAILED (${#_stage_failures[@]} of $_stage_count stages): ${names%, }"
  return 1
}
