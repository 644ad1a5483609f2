#!/usr/bin/env bash
# Fetches Gloo's source from Debian 13's source package (the Sources index that apt verifies
# against Debian's archive key, then the tarball checked against the index's SHA256) and unpacks
# it in ddp's cache, outside the checkout; reused when there. Prints, last, the unpacked folder,
# which the build takes as DDP_GLOO_SOURCE_DIR.
#
# Why: an upstream LibTorch (2.x from PyPI or pytorch.org) carries a Gloo of its own and exports
# its symbols; a ddp linked to Debian's shared libgloo would bind into that copy, or bind LibTorch
# into Debian's (docs/GLOO.md). Built from this source, ddp's Gloo is compiled into ddp with
# hidden symbols: nothing outside ddp can reach it, and ddp reaches nothing else.
#   scripts/private_gloo.sh
# DDP_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/ddp) says where the cache is.
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${DDP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ddp}"
suite=trixie

# A source folder already fetched (any version): reuse it.
found="$(ls -d "$cache"/gloo-src-*/gloo/rendezvous 2>/dev/null | sort | tail -n 1 || true)"
if [ -n "$found" ]; then
  dirname "$(dirname "$found")"
  exit 0
fi

command -v apt-get >/dev/null 2>&1 || {
  echo "private_gloo: apt-get is not here: this script fetches Gloo's source from Debian's archive. Unpack" >&2
  echo "  a Gloo source tree (https://github.com/facebookincubator/gloo) yourself and pass -DDDP_GLOO_SOURCE_DIR=it." >&2
  exit 1
}
scripts/install_packages.sh xz-utils ca-certificates

# apt with a list of sources of our own, in the cache: the system's sources stay as they are.
apt_dir="$cache/apt"
mkdir -p "$apt_dir/lists/partial"
echo "deb-src http://deb.debian.org/debian $suite main" >"$apt_dir/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$apt_dir/lists" -o Debug::NoLocking=1 -o APT::Sandbox::User="$(id -un)")
echo "private_gloo: reading Debian $suite's source index (about 10 MB, once)"
apt-get -q "${apt_opts[@]}" update >"$apt_dir/update.log" 2>&1 || {
  cat "$apt_dir/update.log" >&2
  echo "private_gloo: apt-get update of Debian $suite's sources failed (above)" >&2
  exit 1
}
# 'URL' name size SHA256:hash, one line per file of the source package.
line="$(apt-get "${apt_opts[@]}" --print-uris source "gloo/$suite" 2>/dev/null | grep -E "\.orig\.tar\.[a-z]+' " | head -n 1)"
[ -n "$line" ] || { echo "private_gloo: Debian $suite's index names no source tarball of gloo" >&2; exit 1; }
read -r url name _ hash <<<"$line"
url="${url//\'/}"
version="${name#gloo_}"
version="${version%.orig.tar.*}"
echo "private_gloo: gloo $version from $url"
/usr/lib/apt/apt-helper -o APT::Sandbox::User="$(id -un)" download-file "$url" "$apt_dir/$name" "$hash" >/dev/null
dest="$cache/gloo-src-${version//\~/-}"  # no ~ in a path
rm -rf "$dest.partial"
mkdir -p "$dest.partial"
tar -xf "$apt_dir/$name" -C "$dest.partial" --strip-components="$(tar -tf "$apt_dir/$name" | head -n 1 | grep -q '^[^/]*/$' && echo 1 || echo 0)"
[ -f "$dest.partial/gloo/rendezvous/context.h" ] || { echo "private_gloo: $name holds no gloo/ tree" >&2; exit 1; }
mv "$dest.partial" "$dest"
echo "$dest"
