#!/usr/bin/env bash
# The layer check (cmake/layers.cmake) on copies of the tree: the tree as it is passes, and each
# kind of wall-crossing fails the check with a message that names the file, the header and the rule.
#   tests/layers/layers_test.sh
set -euo pipefail
source_dir="$(cd "$(dirname "$0")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

fresh_copy() {  # the tree's src/, internal/ and its layer table, into $work/tree
  rm -rf "$work/tree" && mkdir -p "$work/tree/cmake"
  cp -r "$source_dir/src" "$work/tree/src"
  cp -r "$source_dir/internal" "$work/tree/internal"
  cp "$source_dir/cmake/layers.cmake" "$work/tree/cmake/"
}
check() { cmake -DDDP_ROOT="$work/tree" -P "$work/tree/cmake/layers.cmake" >"$work/out" 2>&1; }
expect_failure() {  # <case> <text the message must hold>...
  local name="$1"; shift
  if check; then echo "FAIL: $name: the check passed"; cat "$work/out"; exit 1; fi
  for text in "$@"; do
    if ! tr -s ' \n' ' ' <"$work/out" | grep -qF -- "$text"; then
      echo "FAIL: $name: the message lacks: $text"; cat "$work/out"; exit 1
    fi
  done
  echo "ok: $name"
}

fresh_copy
check || { echo "FAIL: the tree as it is crosses a wall"; cat "$work/out"; exit 1; }
echo "ok: the tree as it is"

fresh_copy
echo '#include "flight/recorder.h"' >>"$work/tree/src/core/group/progress.cpp"
expect_failure "a layer reaching up" 'src/core/group/progress.cpp: includes "flight/recorder.h", a header of layer' \
  "'flight', which layer 'group' does not use" "move what both need down a layer"

fresh_copy
echo '#include "nccl/device_copy.h"' >>"$work/tree/src/core/group/local_backend.cpp"
expect_failure "a generic layer naming a backend" 'src/core/group/local_backend.cpp: includes "nccl/device_copy.h"' \
  "layer 'group' does not use"

fresh_copy
echo '#include "shm/segment.h"' >>"$work/tree/src/core/store/tcp_store.cpp"
expect_failure "a layer reaching sideways" 'src/core/store/tcp_store.cpp: includes "shm/segment.h"' "layer 'store' does not use"

fresh_copy
echo '#include "group/progress.h"' >>"$work/tree/src/torch/collectives.cpp"
expect_failure "the front reaching into the core" 'src/torch/collectives.cpp: includes "group/progress.h", a private header of the core' \
  "src/torch builds against include/ddp and internal/ only"

fresh_copy
echo '#include "records/flight_dump.h"' >>"$work/tree/src/core/net/socket.cpp"
expect_failure "a layer reaching up into internal/" 'src/core/net/socket.cpp: includes "records/flight_dump.h"' \
  "layer 'net' does not use"

fresh_copy
echo '#include "records/flight_dump.h"' >>"$work/tree/internal/util/strings.h"
expect_failure "an internal header reaching up" 'internal/util/strings.h: includes "records/flight_dump.h"' \
  "layer 'util' does not use"

fresh_copy
touch "$work/tree/src/core/util/strings.h"
expect_failure "one name for two headers" "internal/util/strings.h and src/core/util/strings.h are both"

fresh_copy
mkdir -p "$work/tree/internal/torch" && touch "$work/tree/internal/torch/x.h"
expect_failure "a folder of internal/ that is no layer" "internal/torch: not a layer"

fresh_copy
echo '#include "store/connection.h"' >>"$work/tree/src/launcher/agent/agent.h"
echo '#include "flight/recorder.h"' >>"$work/tree/src/tools/ddp_trace/main.cpp"
expect_failure "the launcher and a tool reaching into the core, both named" "2 include(s) cross a wall" \
  'src/launcher/agent/agent.h: includes "store/connection.h"' 'src/tools/ddp_trace/main.cpp: includes "flight/recorder.h"'

fresh_copy
sed -i 's/^  "util:"/  "util:group"/' "$work/tree/cmake/layers.cmake"
expect_failure "a layer table with a cycle" "layer 'util' uses 'group', which is not a layer below it"
