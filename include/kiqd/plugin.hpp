#pragma once
// The plugin ABI: a shared object listed under `plugins:` in the YAML registers handlers (and
// middleware) when kiqd starts. Write a plugin with the KIQD_PLUGIN macro:
//
//   #include <kiqd/plugin.hpp>
//
//   KIQD_PLUGIN(handlers, middleware) {
//       handlers.add("ResizeImage", [](const kiqd::Job& job, kiqd::JobContext& ctx) {
//           ctx.log.info("resizing {}", job.args().dump());
//       });
//   }
//
// and build it as a MODULE library against the same kiqd (find_package(kiqd) →
// kiqd::plugin_api, which leaves kiqd's own symbols to be resolved from the daemon binary).
//
// The macro defines two C-linkage entry points that kiqd looks up with dlsym:
//   int  kiqd_plugin_abi_version(void)  → KIQD_PLUGIN_ABI_VERSION as the plugin was compiled
//   void kiqd_plugin_register(kiqd::PluginHost*)
// kiqd refuses (exit 78, naming the plugin) a plugin whose version differs from its own, because
// the registry, Job and JobContext layouts are shared C++ types. The version changes whenever
// any of the types a plugin sees (handler_registry.hpp, job.hpp, job_context.hpp,
// middleware_chain.hpp, config.hpp) changes layout. Build plugins with the same compiler and
// standard library as the daemon.
//
// Handlers from plugins are ordinary handlers: they run inside the server-middleware chain, and
// an exception they throw becomes a normal retry. A plugin is never unloaded.
#include "kiqd/handler_registry.hpp"
#include "kiqd/job.hpp"
#include "kiqd/job_context.hpp"
#include "kiqd/middleware_chain.hpp"

// 2: pause strategies in MiddlewareRegistry, JobContext::client, ClassSpec's new fields,
// HandlerRegistry declarations (metadata).
// 3: redis::Reply, ReplyRef and Connection carry the reply-stream state (a reply of the wrong
// type makes the connection reconnect).
// 4: Job keeps the places of the members kiqd reads (member_json), for reading them without
// building the payload's tree.
// 5: Config gains load_warnings `runners`, `runner_handlers`, `cron` and this release's other
// new sections; Connection remembers whether it was ever open (reconnects are counted).
// 6: JobContext::acquired and after_refill (what a batched refill acquired for the job).
#define KIQD_PLUGIN_ABI_VERSION 6

namespace kiqd {

// What a plugin's register function receives. Valid only during the call.
struct PluginHost {
    int abi_version;                 // the daemon's KIQD_PLUGIN_ABI_VERSION
    const char* kiqd_version;        // the daemon's KIQD_VERSION
    const char* plugin_path;         // as listed in the YAML
    HandlerRegistry* handlers;       // add handlers here
    MiddlewareRegistry* middleware;  // add named middleware here (listed in server_middleware:)
};

}  // namespace kiqd

extern "C" {
using kiqd_plugin_abi_version_fn = int (*)();
using kiqd_plugin_register_fn = void (*)(kiqd::PluginHost*);
}

// Defines the plugin's entry points; the body receives `handlers_var` (kiqd::HandlerRegistry&)
// and `middleware_var` (kiqd::MiddlewareRegistry&). Throwing from the body stops startup with
// exit 78 and the exception's message.
#define KIQD_PLUGIN(handlers_var, middleware_var)                                      \
    static void kiqd_plugin_body(kiqd::HandlerRegistry& handlers_var,                  \
                                 kiqd::MiddlewareRegistry& middleware_var);            \
    extern "C" __attribute__((visibility("default"))) int kiqd_plugin_abi_version() {  \
        return KIQD_PLUGIN_ABI_VERSION;                                                \
    }                                                                                  \
    extern "C" __attribute__((visibility("default"))) void kiqd_plugin_register(       \
        kiqd::PluginHost* host) {                                                      \
        kiqd_plugin_body(*host->handlers, *host->middleware);                          \
    }                                                                                  \
    static void kiqd_plugin_body([[maybe_unused]] kiqd::HandlerRegistry& handlers_var, \
                                 [[maybe_unused]] kiqd::MiddlewareRegistry& middleware_var)
