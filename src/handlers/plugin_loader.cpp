#include "handlers/plugin_loader.hpp"

#include <dlfcn.h>

#include "kiqd/plugin.hpp"

namespace kiqd {

LoadedPlugin load_plugin(const PluginSpec& spec, HandlerRegistry& handlers,
                         MiddlewareRegistry& middleware) {
    // dlopen searches the library path for names without a '/'; a plugin listed as
    // "libjobs.so" is meant relative to the working directory, as a path in a config would be.
    const std::string path =
        spec.path.find('/') == std::string::npos ? "./" + spec.path : spec.path;
    dlerror();
    void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char* why = dlerror();
        throw PluginError(spec.path, std::string("cannot be loaded: ") + (why ? why : "?"),
                          spec.line);
    }
    auto version =
        reinterpret_cast<kiqd_plugin_abi_version_fn>(::dlsym(lib, "kiqd_plugin_abi_version"));
    auto reg = reinterpret_cast<kiqd_plugin_register_fn>(::dlsym(lib, "kiqd_plugin_register"));
    if (!version || !reg) {
        throw PluginError(spec.path,
                          std::string("is not a kiqd plugin: missing entry point ") +
                              (!version ? "kiqd_plugin_abi_version" : "kiqd_plugin_register") +
                              " (define it with KIQD_PLUGIN from <kiqd/plugin.hpp>)",
                          spec.line);
    }
    const int v = version();
    if (v != KIQD_PLUGIN_ABI_VERSION) {
        throw PluginError(spec.path,
                          "was built for kiqd plugin ABI version " + std::to_string(v) +
                              ", but this kiqd " + KIQD_VERSION + " has ABI version " +
                              std::to_string(KIQD_PLUGIN_ABI_VERSION) +
                              ": rebuild it against this kiqd's headers",
                          spec.line);
    }
    const size_t before = handlers.size();
    PluginHost host{KIQD_PLUGIN_ABI_VERSION, KIQD_VERSION, spec.path.c_str(), &handlers,
                    &middleware};
    try {
        reg(&host);
    } catch (const std::exception& e) {
        throw PluginError(spec.path, std::string("failed to register: ") + e.what(), spec.line);
    } catch (...) {
        throw PluginError(spec.path, "failed to register: unknown exception", spec.line);
    }
    // `lib` is deliberately never closed: its handlers live as long as the process.
    return {spec.path, handlers.size() - before};
}

std::vector<LoadedPlugin> load_plugins(const Config& config, HandlerRegistry& handlers,
                                       MiddlewareRegistry& middleware) {
    std::vector<LoadedPlugin> out;
    for (const auto& spec : config.plugins) out.push_back(load_plugin(spec, handlers, middleware));
    return out;
}

}  // namespace kiqd
