#!/usr/bin/env bash
# `cmake --install` the build tree given as $1, then configure, build and run a separate project
# that uses find_package(ddp) and the targets ddp::core and ddp::torch; and compile the README's
# "API at a glance" block as written, which must need no header but <ddp/ddp.h>.
set -euo pipefail
build="$1"
here="$(cd "$(dirname "$0")" && pwd)"
readme="$here/../../README.md"
work="$(mktemp -d /tmp/ddp-install-test.XXXXXX)"
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null

# What is installed is what a user includes: the headers docs/ARCHITECTURE.md lists, nothing else.
listed="$(awk '/^<!-- installed headers -->/ {on = 1; next} /^<!-- end of installed headers -->/ {on = 0}
               on {while (match($0, /`ddp\/[^`]+\.h`/)) {print substr($0, RSTART + 1, RLENGTH - 2); $0 = substr($0, RSTART + RLENGTH)}}' \
          "$here/../../docs/ARCHITECTURE.md" | sort)"
installed="$(cd "$work/prefix/include" && find . -type f | sed 's|^\./||' | sort)"
[ -n "$listed" ] || { echo "install_test: docs/ARCHITECTURE.md lists no installed headers"; exit 1; }
if [ "$listed" != "$installed" ]; then
  echo "install_test: the installed headers differ from docs/ARCHITECTURE.md's list (< listed, > installed):"
  diff <(echo "$listed") <(echo "$installed") || true
  exit 1
fi

# The block's #include lines first, then the prelude (the model, tensors... it takes as given),
# then its statements in a function. Nothing of it is run: new_group({0, 2}) needs 3 ranks.
block="$work/block.txt"
awk '/^## The API at a glance/ {in_section = 1} in_section && /^```cpp/ {in_block = 1; next}
     in_block && /^```/ {exit} in_block {print}' "$readme" >"$block"
grep -q 'ddp::' "$block" || { echo "install_test: no C++ block under '## The API at a glance' in $readme"; exit 1; }
{
  grep '^#include' "$block"
  echo '#include "readme_prelude.h"'
  echo 'void readme_api(readme::Given& given) {'
  echo '  auto& [model, tensor, output, loss, outputs, inputs, outs, ins, dataset_size] = given;'
  grep -v '^#include' "$block"
  echo '}'
  echo 'int main(int argc, char**) { readme::Given given; if (argc > 99) readme_api(given); }'
} >"$work/readme_api.cpp"

# Nothing but ddp's prefix: ddp's package finds the LibTorch it was built against by itself.
cmake -S "$here/consumer" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DREADME_API="$work/readme_api.cpp" >/dev/null
cmake --build "$work/build" >"$work/build.log" 2>&1 || {
  cat "$work/build.log"
  echo "--- $work/readme_api.cpp (from README.md):"
  cat -n "$work/readme_api.cpp"
  exit 1
}
"$work/build/core_user"
if [ -x "$work/build/torch_user" ]; then
  "$work/build/torch_user"
  # Two ranks whose gradients cross Gloo over TCP, launched by the installed ddprun.
  DDP_SHM=0 "$work/prefix/bin/ddprun" --standalone --nproc_per_node=2 "$work/build/torch_user"
  test -x "$work/build/readme_api" && echo "readme_api: the README's API block compiles with <ddp/ddp.h> alone"
fi
test -x "$work/prefix/bin/ddprun" && "$work/prefix/bin/ddprun" --version
