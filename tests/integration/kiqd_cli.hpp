#pragma once
// The kiqd binary under test and its command line against a test Redis, for the integration
// tests that run kiqd's subcommands (KIQD_BINARY is defined by tests/CMakeLists.txt).
#include <string>
#include <utility>
#include <vector>

#include "support/kiqd_process.hpp"
#include "support/redis_server.hpp"

namespace kiqd::test {

// KIQD_BINARY, unless KIQD_BINARY_UNDER_TEST names another build (binary_under_test).
inline std::string kiqd_binary() {
    return binary_under_test(KIQD_BINARY);
}

// `kiqd args...` with REDIS_URL set to `server`'s; returns {exit status, stdout+stderr}.
inline std::pair<int, std::string> kiqd_cli(const RedisServer& server,
                                            std::vector<std::string> args) {
    args.insert(args.begin(), KIQD_BINARY);
    return run_command(args, {{"REDIS_URL", server.url()}});
}

}  // namespace kiqd::test
