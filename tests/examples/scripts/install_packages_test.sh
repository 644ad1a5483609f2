#!/usr/bin/env bash
# scripts/install_packages.sh: a user who is not root and has no sudo is told what to run
# instead; an install shows apt-get's own output; nothing missing, nothing run.
#   install_packages_test.sh SOURCE_DIR
set -uo pipefail
source "$(dirname "$0")/checks.sh"
tmp="$(mktemp -d)"
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
# A copy that the user without root below can read wherever the checkout lies (under /root: 0700).
script="$tmp/install_packages.sh"
install -m 755 "$1/scripts/install_packages.sh" "$script"

# A PATH with only what the script needs, so no sudo is on it whatever this machine has.
mkdir "$tmp/bin"
for tool in bash env dpkg-query grep id cat; do ln -s "$(command -v "$tool")" "$tmp/bin/$tool"; done
as_nobody=()
[ "$(id -u)" -ne 0 ] || as_nobody=("$(command -v setpriv)" --reuid=65534 --regid=65534 --clear-groups)

# 1. Not root, no sudo, a package missing: a message naming the way out, and no attempt.
out="$(PATH="$tmp/bin" "${as_nobody[@]}" "$script" ddp-test-no-such-package 2>&1)"
status=$?
expect_eq "$status" 1 "exit status without root and sudo"
expect_contains "$out" "sudo is not installed"
expect_contains "$out" "Run this script as root"
expect_contains "$out" "apt-get update && apt-get install -y --no-install-recommends ddp-test-no-such-package"
expect_contains "$out" "apt-get install sudo"

# 2. An install (root, or a user with sudo): apt-get's output reaches the screen, with a line per
# stage. apt-get and sudo here are stand-ins that record their arguments and speak as apt does.
mkdir "$tmp/fake"
cat >"$tmp/fake/apt-get" <<'FAKE'
#!/bin/bash
echo "apt-get $*" >>"$APT_LOG"
case " $* " in
  *" install "*) echo "Need to get 512 MB of archives."; echo "Get:1 http://deb.debian.org/debian bookworm/main amd64 ddp-test 1.0 [512 MB]" ;;
  *" update "*) echo "Hit:1 http://deb.debian.org/debian bookworm InRelease" ;;
esac
FAKE
printf '#!/bin/bash\nexec "$@"\n' >"$tmp/fake/sudo"
chmod +x "$tmp/fake/apt-get" "$tmp/fake/sudo"
export APT_LOG="$tmp/apt.log"
out="$(PATH="$tmp/fake:$PATH" "$script" bash ddp-test-no-such-package 2>&1)"
status=$?
expect_eq "$status" 0 "exit status of an install"
expect_contains "$out" "setup: installing 1 Debian packages: ddp-test-no-such-package"
expect_contains "$out" "Hit:1 http://deb.debian.org/debian bookworm InRelease" "apt-get update's output"
expect_contains "$out" "Need to get 512 MB of archives." "apt-get install's output"
expect_contains "$out" "Get:1 http://deb.debian.org/debian bookworm/main amd64 ddp-test 1.0 [512 MB]"
expect_contains "$out" "[2/2] apt-get install"
calls="$(cat "$APT_LOG")"
expect_contains "$calls" "install -y --no-install-recommends ddp-test-no-such-package" "apt-get's arguments"
expect_not_contains "$calls" "-qq" "apt-get's arguments"
expect_not_contains "$calls" " bash" "apt-get's arguments (bash is installed)"

# 3. Nothing missing: silent, and apt-get is not run.
rm -f "$APT_LOG"
out="$(PATH="$tmp/fake:$PATH" "$script" bash grep 2>&1)"
expect_eq "$?" 0 "exit status with nothing missing"
expect_eq "$out" "" "output with nothing missing"
[ ! -e "$APT_LOG" ] || fail "apt-get ran with nothing missing"

finish
