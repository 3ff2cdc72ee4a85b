#pragma once
// The `runners:` section (RunnerSpec in kiqd/config.hpp) and the check that every
// `handlers: … runner:` names one. Config is built once on the main thread, then read-only.
#include <yaml-cpp/yaml.h>

#include <vector>

#include "kiqd/config.hpp"

namespace kiqd::config_detail {

// Every runner, in file order. Throws ConfigError naming the key and its line.
std::vector<RunnerSpec> parse_runners(const YAML::Node& n);

// Each runner handler's runner exists; `processes: 0` becomes the number of CPUs. Throws
// ConfigError naming handlers.<class>.runner.
void validate_runners(Config& c);

}  // namespace kiqd::config_detail
