#pragma once
// Loads the `plugins:` of the configuration (see plugin.hpp): dlopen (RTLD_NOW | RTLD_LOCAL),
// the ABI check, then the plugin's register function. Runs on the main thread before any
// processor starts. Plugins are never unloaded.
#include <string>
#include <vector>

#include "kiqd/config.hpp"
#include "kiqd/handler_registry.hpp"
#include "kiqd/middleware_chain.hpp"

namespace kiqd {

// A plugin that cannot be used: missing file, missing entry point, another ABI version, or a
// register function that threw. main() turns it into exit 78 (EX_CONFIG) with the message.
class PluginError : public ConfigError {
  public:
    PluginError(const std::string& path, const std::string& message, int line = -1)
        : ConfigError("plugin " + path, message, line) {}
};

struct LoadedPlugin {
    std::string path;
    size_t handlers_added;  // registry growth (replacements are not counted)
};

// Loads one plugin into the registries. Throws PluginError.
LoadedPlugin load_plugin(const PluginSpec& spec, HandlerRegistry& handlers,
                         MiddlewareRegistry& middleware);
// Loads every plugin of the config, in order. Throws PluginError for the first that fails.
std::vector<LoadedPlugin> load_plugins(const Config& config, HandlerRegistry& handlers,
                                       MiddlewareRegistry& middleware);

}  // namespace kiqd
