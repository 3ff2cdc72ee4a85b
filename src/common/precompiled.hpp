#pragma once
// The precompiled header of kiqd_core and the test suites (cmake/build_cost.cmake): compiled once
// per target and loaded before every file of it. Never #include it: a file includes what it uses,
// as if this header did not exist (a build with -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON checks it).
//
// What is here: the headers at least a third of kiqd_core's files include, heaviest first, and
// the standard library they are built on. Boost.Asio/Beast (four files) and <regex> (seven) are
// not: every file would pay for loading them.
#include <fmt/format.h>
#include <hiredis/hiredis.h>
#include <spdlog/logger.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include "json_instances.hpp"  // beside this file

// fmt's formatting engine, detail::vformat_to<char>, is compiled into libfmt, but fmt 9's
// headers do not say so (fmt 10's do): without this declaration every file that logs or
// formats instantiates and optimises its own copy of it and of the number formatting under it
// (~50 KB of code each time), and the linker keeps one. With it, each call goes to libfmt's.
// GCC only: clang names the instance's context type differently from the libfmt that Debian's
// GCC built, so a clang build (the fuzz targets) would call a symbol libfmt does not have.
#if defined(FMT_VERSION) && FMT_VERSION >= 90000 && FMT_VERSION < 100000 && \
    !defined(FMT_HEADER_ONLY) && !defined(__clang__)
namespace fmt {
inline namespace v9 {
namespace detail {
extern template void vformat_to<char>(buffer<char>&, basic_string_view<char>,
                                      basic_format_args<FMT_BUFFER_CONTEXT(char)>, locale_ref);
}  // namespace detail
}  // namespace v9
}  // namespace fmt
#endif

// nlohmann/json's parsers and serializers: compiled once, in json_instances.cpp.
#ifdef KIQD_JSON_INSTANCES_KNOWN
KIQD_JSON_INSTANCES(extern template)
#endif
