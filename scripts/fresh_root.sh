#!/usr/bin/env bash
# The README's commands on a fresh Debian 12, as a new user runs them: makes a minimal Debian 12
# root with debootstrap (nothing but the base), clones this checkout's HEAD into its /root/ddp, and
# runs the commands there as root in a bare environment (env -i: no LANG), with a hostname that
# does not resolve and no /etc/hosts, printing how long each took. The machine's CUDA toolkit
# (/usr/local/cuda, as CI's machine has it) is mounted read-only for the LibTorch 2.x stages.
#   scripts/fresh_root.sh [DIR] [COMMAND...]
# DIR (default ${DDP_CACHE:-~/.cache/ddp}/fresh-root) is made anew each run; COMMAND (default
# "scripts/quickstart.sh && scripts/test.sh") runs in the clone. Needs root (debootstrap, chroot,
# mounts); its log is DIR.log. For other rehearsals (scripts/gpu_rehearsal.sh):
#   FRESH_ROOT_PACKAGES="cmake g++"  Debian packages installed in the root before the command
#   FRESH_ROOT_MOUNTS="/a /b"        folders of this machine mounted read-only at the same paths
#   FRESH_ROOT_COPY="gpu-bundle"     files or folders of the checkout copied into the clone (ignored ones)
#   FRESH_ROOT_REUSE=1               keep an earlier run's root (its packages, caches and build folders)
#                                    and only move its clone to this checkout's HEAD: a quicker
#                                    second look after a fix, not a fresh machine's verdict
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "fresh_root: needs root (debootstrap, chroot and mounts)" >&2; exit 2; }
cache="${DDP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ddp}"
root="${1:-$cache/fresh-root}"
shift || true
command="${*:-scripts/quickstart.sh && scripts/test.sh}"
log="$root.log"
repo="$(pwd)"

scripts/install_packages.sh debootstrap util-linux git
mkdir -p "$(dirname "$root")"
exec > >(tee "$log") 2>&1

echo "fresh_root: a minimal Debian 12 (bookworm) in $root"
if mountpoint -q "$root/proc" 2>/dev/null; then
  echo "fresh_root: $root has mounts of an earlier run still in place: unmount them first" >&2
  exit 2
fi
if [ "${FRESH_ROOT_REUSE:-0}" = 1 ] && [ -d "$root/root/ddp/.git" ]; then
  echo "fresh_root: reusing $root (FRESH_ROOT_REUSE=1); its clone moves to $(git rev-parse --short HEAD)"
  git -C "$root/root/ddp" fetch -q "$repo" HEAD
  git -C "$root/root/ddp" checkout -q --detach FETCH_HEAD
  for item in ${FRESH_ROOT_COPY:-}; do rm -rf "$root/root/ddp/$item"; cp -r "$repo/$item" "$root/root/ddp/$item"; done
else
  rm -rf "$root"
  start=$SECONDS
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$root.debootstrap.log" 2>&1 || {
    tail -n 20 "$root.debootstrap.log"
    echo "fresh_root: debootstrap failed (above; the whole log is $root.debootstrap.log)" >&2
    exit 1
  }
  echo "fresh_root: debootstrap took $((SECONDS - start)) s"
  # What a fresh machine on this network has that a chroot does not: name servers, and the local
  # certificate authorities its TLS proxy needs (the root's ca-certificates adds them to its store
  # when it is installed) with pip's setting to trust that store. No /etc/hosts, as debootstrap leaves it.
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  rm -f "$root/etc/hosts"
  if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  fi
  [ -f /etc/pip.conf ] && cp /etc/pip.conf "$root/etc/pip.conf"
  git clone -q "$repo" "$root/root/ddp"
  for item in ${FRESH_ROOT_COPY:-}; do cp -r "$repo/$item" "$root/root/ddp/$item"; done
  if [ -n "${FRESH_ROOT_PACKAGES:-}" ]; then
    chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
      sh -c "apt-get -q update && apt-get -q install -y --no-install-recommends $FRESH_ROOT_PACKAGES" >"$root.packages.log" 2>&1 || {
      tail -n 20 "$root.packages.log"
      echo "fresh_root: installing $FRESH_ROOT_PACKAGES failed (above)" >&2
      exit 1
    }
  fi
fi

cuda="$(readlink -f /usr/local/cuda 2>/dev/null || true)"
# In a mount namespace of its own (the mounts go when it ends) and a UTS namespace whose hostname
# resolves nowhere: /proc, /sys, /dev with /dev/shm, /run (network namespaces), the CUDA toolkit.
inner=$(cat <<INNER
set -e
mount -t proc proc "$root/proc"
mount -t sysfs sys "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs tmpfs "$root/dev/shm"
mount -t tmpfs tmpfs "$root/run"
if [ -d "$cuda" ]; then  # at its real path, behind the same link as here (its own links point there)
  mkdir -p "$root$cuda"
  mount --rbind "$cuda" "$root$cuda"
  mount -o remount,bind,ro "$root$cuda"
  [ "$cuda" = /usr/local/cuda ] || ln -sfn "$cuda" "$root/usr/local/cuda"
fi
for dir in ${FRESH_ROOT_MOUNTS:-}; do
  mkdir -p "$root\$dir"
  mount --rbind "\$dir" "$root\$dir"
  mount -o remount,bind,ro "$root\$dir"
done
hostname fresh-root-unresolvable
exec chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  /bin/bash -c 'cd /root/ddp && start=\$SECONDS && ($command); status=\$?; echo "fresh_root: the commands took \$(((SECONDS - start) / 60)) min \$(((SECONDS - start) % 60)) s, exit status \$status"; exit \$status'
INNER
)
status=0
unshare --mount --uts --propagation private bash -c "$inner" || status=$?
echo "fresh_root: exit status $status; the log is $log"
exit "$status"
