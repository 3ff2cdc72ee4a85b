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

// The Config a whole text loads as (parsed for environment "production" and validated);
// throws ConfigError.
inline Config load_validated(const std::string& yaml) {
    auto c = parse_config(yaml, "sidekiq.yml", "production");
    validate_config(c);
    return c;
}

// The error a whole text produces once validated, or "" when it loads.
inline std::string validation_error_of(const std::string& yaml) {
    return config_error_of(yaml, validate_config);
}

// A config text serving queue `default` followed by `yaml`, parsed for environment "production"
// and validated (what the daemon loads); throws ConfigError.
inline Config load_default_queue(const std::string& yaml) {
    auto c = parse_config("queues: [default]\n" + yaml, "test.yml", "production");
    validate_config(c);
    return c;
}

// The error that text produces, or "" when it loads.
inline std::string default_queue_error_of(const std::string& yaml) {
    return config_error_of("queues: [default]\n" + yaml, validate_config);
}

}  // namespace kiqd::test
