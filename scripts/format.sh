#!/usr/bin/env bash
# Checks that every C and C++ file git tracks is formatted as .clang-format says (clang-format 14,
# Debian 12's), naming each file that is not and the command that fixes it; with --fix, formats
# them in place.
#   scripts/format.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_packages.sh clang-format
mapfile -t files < <(git ls-files '*.c' '*.cc' '*.cpp' '*.h')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
unformatted=()
for f in "${files[@]}"; do
  if ! clang-format --dry-run --Werror "$f" 2>/dev/null; then unformatted+=("$f"); fi
done
if ((${#unformatted[@]})); then
  echo "format: ${#unformatted[@]} of ${#files[@]} files differ from .clang-format:" >&2
  for f in "${unformatted[@]}"; do
    echo "  $f ($(clang-format "$f" | diff "$f" - | grep -c '^[<>]') lines)" >&2
  done
  echo "format: run scripts/format.sh --fix, look at the change, and commit it" >&2
  exit 1
fi
echo "format: all ${#files[@]} C and C++ files follow .clang-format"
