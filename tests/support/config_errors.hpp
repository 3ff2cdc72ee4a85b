#pragma once
// config_error_of: the message of the ConfigError a YAML text raises (what `kiqd` prints before
// exiting 78), or "" when it loads — for unit tests that assert exact messages. `check` runs on
// the parsed Config as well (validate_config, resolving pause strategies, ...).
#include <functional>
#include <string>

#include "kiqd/config.hpp"

namespace kiqd::test {

inline std::string config_error_of(const std::string& yaml,
                                   const std::function<void(Config&)>& check = {}) {
    try {
        auto config = parse_config(yaml, "test.yml", "production");
        if (check) check(config);
        return "";
    } catch (const ConfigError& e) {
        return e.what();
    }
}

}  // namespace kiqd::test
