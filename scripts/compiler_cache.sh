# The compiler cache (ccache) in ddp's cache folder, outside the checkout (sourced by setup.sh and
# fuzz.sh). Every build folder's compiler runs through it, with paths made relative to the checkout
# (CCACHE_BASEDIR), so a source compiled with the same flags in two build folders, or in another
# clone, is compiled once: the core and Gloo, which do not depend on which LibTorch a build uses,
# compile once for the 1.13 and the 2.15 builds; a second run compiles only what changed.
# Sets ccache_launcher (CMake arguments, empty without ccache).
#   source scripts/compiler_cache.sh
# DDP_CCACHE=0 turns it off; DDP_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/ddp) says where.
ccache_launcher=()
if [ "${DDP_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null 2>&1; then
  export CCACHE_DIR="${CCACHE_DIR:-${DDP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ddp}/ccache}"
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
  # Precompiled headers: ccache needs these to cache the units that include them (its manual, "Precompiled headers").
  export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
  # The build folder's own path in the debug information would defeat the sharing between folders.
  export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
  ccache_launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
