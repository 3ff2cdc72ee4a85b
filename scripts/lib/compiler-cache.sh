# Sourced by the build scripts (scripts/test, test-sanitizers, fuzz, test-deb): compile through
# ccache when it is installed (scripts/install-deps installs it), so that a rebuild compiles only
# what changed and the build trees (build/, build-deb/, ...) share their objects. Sets
# `compiler_cache` to the CMake arguments to configure with (none without ccache).
# CCACHE_BASEDIR: cached objects do not depend on where the checkout is; CCACHE_NOHASHDIR: nor
# on the build directory's name. CMakeLists.txt sets what ccache needs for the precompiled
# headers (cmake/build_cost.cmake). KIQD_CCACHE=0 compiles without it.
compiler_cache=()
if [ "${KIQD_CCACHE:-1}" = 1 ] && command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
  compiler_cache=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
