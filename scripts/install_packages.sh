#!/usr/bin/env bash
# Installs those of the given Debian packages that are missing, with apt-get's own account of it
# on screen (the download size, then each package as it downloads, unpacks and is set up). Needs
# root: as another user it goes through sudo, and when there is no sudo it says what to run.
#   scripts/install_packages.sh PACKAGE...
set -euo pipefail

missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]})) || exit 0

as_root=()
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    cat >&2 <<MESSAGE
setup: ${#missing[@]} Debian packages are missing: ${missing[*]}
setup: installing them needs root, and sudo is not installed (a minimal Debian has none).
setup: Run this script as root, or install the packages as root first and run it again:
  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}
setup: (or, as root, install sudo and allow yourself to use it: apt-get install sudo && adduser $(id -un) sudo)
MESSAGE
    exit 1
  fi
  as_root=(sudo)
fi

# On a terminal apt-get draws its progress bar; in a log (CI) -q leaves one line per step.
quiet=()
[ -t 1 ] || quiet=(-q)
echo "setup: installing ${#missing[@]} Debian packages: ${missing[*]}"
echo "setup: [1/2] apt-get update: the package lists"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${quiet[@]}" update
echo "setup: [2/2] apt-get install: the download size first, then each package"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${quiet[@]}" install -y --no-install-recommends "${missing[@]}"
echo "setup: installed ${missing[*]}"
