# What a build costs, and how it is kept down (docs/architecture.md, "The build").
#
# Nearly every source file includes the same heavy headers: nlohmann/json, yaml-cpp, spdlog and
# fmt, hiredis and much of the standard library. Compiled file by file, each one parses them
# again and instantiates and optimises the same inline templates again (JSON parsing, spdlog's
# log calls, fmt's formatting), only for the linker to throw the copies away. Two standard CMake
# features cut that:
#
# * precompiled headers (target_precompile_headers): the common headers are parsed once per
#   target. CMAKE_DISABLE_PRECOMPILE_HEADERS=ON turns them off (a build without them is how to
#   check that a file includes what it uses).
# * unity build (UNITY_BUILD): the files of a target are compiled in batches of
#   KIQD_UNITY_BATCH_SIZE, each batch one translation unit, so a template used by every file
#   is instantiated and optimised once per batch. A change to one file rebuilds its batch only.
#   Files of a batch share one anonymous namespace, so two files may not define the same
#   internal name: give helpers names of their own (the build fails, naming both, otherwise).
#   KIQD_UNITY_BUILD=OFF compiles file by file.
#
# Neither changes a compiler flag: the objects are optimised and warned about as before.
# The compiler cache (ccache) caches the batches and the precompiled headers as long as it is
# told to trust them (the sloppiness below); scripts/test and CI use it when it is installed.

option(KIQD_UNITY_BUILD "Compile kiqd_core and the test suites in batches of files" ON)
set(KIQD_UNITY_BATCH_SIZE 8 CACHE STRING "Source files per unity batch (KIQD_UNITY_BUILD)")

# The headers most files include, and what else every file should know (see the header).
get_filename_component(KIQD_PCH_HEADER ${CMAKE_CURRENT_LIST_DIR}/../src/common/precompiled.hpp
  ABSOLUTE)

# Precompiled headers and unity batches for `target`. EXTRA_PCH: headers of its own to add to
# the precompiled set (Catch2 for the test suites). PCH_FROM: load that target's precompiled
# header instead of compiling one (a target of one or two files would spend more on its own
# header than it saves); the two must be compiled with the same options, as kiqd_core and the
# programs linking it are.
function(kiqd_reduce_build_cost target)
  cmake_parse_arguments(arg "" "PCH_FROM" "EXTRA_PCH" ${ARGN})
  if(arg_PCH_FROM)
    target_precompile_headers(${target} REUSE_FROM ${arg_PCH_FROM})
  else()
    target_precompile_headers(${target} PRIVATE ${KIQD_PCH_HEADER} ${arg_EXTRA_PCH})
  endif()
  # clang stamps a precompiled header with its time, which ccache cannot cache; without the
  # stamp clang still refuses a header that changed (CMake rebuilds it first anyway).
  target_compile_options(${target} PRIVATE $<$<CXX_COMPILER_ID:Clang>:-Xclang -fno-pch-timestamp>)
  get_target_property(sources ${target} SOURCES)
  list(LENGTH sources count)
  if(KIQD_UNITY_BUILD AND count GREATER 1)
    set_target_properties(${target} PROPERTIES
      UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${KIQD_UNITY_BATCH_SIZE})
  endif()
endfunction()

# ccache and precompiled headers: without `pch_defines,time_macros` ccache cannot vouch for a
# file compiled against a precompiled header and compiles it every time. Wraps whatever
# launcher is ccache (CMAKE_CXX_COMPILER_LAUNCHER=ccache from the environment or -D) so that
# every build that uses ccache gets it, whoever configured it.
if(CMAKE_CXX_COMPILER_LAUNCHER MATCHES "(^|/)ccache$")
  set(CMAKE_CXX_COMPILER_LAUNCHER ${CMAKE_COMMAND} -E env
    CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
    ${CMAKE_CXX_COMPILER_LAUNCHER})
endif()
