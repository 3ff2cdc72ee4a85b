#pragma once
// The `handlers:` section of the config (ExecHandlerSpec and ClassSpec in kiqd/config.hpp).
// Config is built once on the main thread, then read-only.
#include <yaml-cpp/yaml.h>

#include <map>
#include <string>
#include <vector>

#include "kiqd/config.hpp"

namespace kiqd::config_detail {

// Fills `classes` with every entry but "*" and `runner_handlers` with the runner: entries;
// returns the exec handlers in file order. Throws ConfigError.
std::vector<ExecHandlerSpec> parse_handlers(const YAML::Node& n,
                                            std::map<std::string, ClassSpec>& classes,
                                            std::vector<RunnerHandlerSpec>& runner_handlers);

}  // namespace kiqd::config_detail
