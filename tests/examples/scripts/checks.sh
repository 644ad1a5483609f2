# Assertions for the tests of scripts/ (sourced). Each failure is printed with what was seen;
# finish exits non-zero when any check failed.
_failures=0

fail() {
  echo "FAILED: $*" >&2
  _failures=$((_failures + 1))
}

# expect_contains TEXT NEEDLE [what]
expect_contains() {
  [[ "$1" == *"$2"* ]] || fail "${3:-output} lacks '$2'; it was:"$'\n'"$1"
}

expect_not_contains() {
  [[ "$1" != *"$2"* ]] || fail "${3:-output} has '$2'; it was:"$'\n'"$1"
}

# expect_eq ACTUAL EXPECTED what
expect_eq() {
  [ "$1" = "$2" ] || fail "$3: '$1', expected '$2'"
}

finish() {
  if ((_failures)); then
    echo "$_failures checks failed" >&2
    exit 1
  fi
  echo "all checks passed"
}
