#!/usr/bin/env bash
# `cmake --install` the build tree given as $1, then configure, build and run a separate project
# that uses find_package(ddp) and the targets ddp::core and ddp::torch.
set -euo pipefail
build="$1"
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d /tmp/ddp-install-test.XXXXXX)"
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$here/consumer" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
"$work/build/core_user"
if [ -x "$work/build/torch_user" ]; then "$work/build/torch_user"; fi
test -x "$work/prefix/bin/ddprun" && "$work/prefix/bin/ddprun" --version
