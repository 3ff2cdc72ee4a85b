#pragma once
// The server-middleware chain: the single extension point around every handler call (the shape
// of Sidekiq's server middleware). One chain is built at startup from `server_middleware:` in
// the YAML and shared by all processor threads, so a middleware must be const-callable and keep
// per-job state in the JobContext, never in members.
#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiqd/job_context.hpp"
#include "kiqd/pause_strategy.hpp"

namespace kiqd {

using Next = std::function<void()>;

class ServerMiddleware {
  public:
    virtual ~ServerMiddleware() = default;
    virtual std::string_view name() const = 0;
    // Run code before and after next(). Call next() at most once. Returning without calling it
    // means the job was put somewhere else (parked, rescheduled): it then counts as neither
    // processed nor failed, so only do that after the job is safely stored. Throw to fail it.
    virtual void call(JobContext& ctx, const Next& next) const = 0;
};

class MiddlewareChain {
  public:
    void add(std::shared_ptr<const ServerMiddleware> m) { entries_.push_back(std::move(m)); }
    void prepend(std::shared_ptr<const ServerMiddleware> m) {
        entries_.insert(entries_.begin(), std::move(m));
    }
    // Runs the chain around `handler`; sets ctx.handler_ran when the handler was reached.
    void invoke(JobContext& ctx, const std::function<void()>& handler) const;
    std::vector<std::string> names() const;
    bool empty() const { return entries_.empty(); }

  private:
    void invoke_from(size_t i, JobContext& ctx, const std::function<void()>& handler) const;
    std::vector<std::shared_ptr<const ServerMiddleware>> entries_;
};

// Named middleware factories, so that the YAML can list middlewares by name with options.
// Filled before startup; read-only afterwards.
using MiddlewareFactory =
    std::function<std::shared_ptr<const ServerMiddleware>(const YAML::Node& options)>;

class MiddlewareRegistry {
  public:
    void add(std::string name, MiddlewareFactory factory);
    // Builds the chain for a `server_middleware:` list; throws ConfigError for unknown names
    // or bad options (factories throw ConfigError themselves).
    MiddlewareChain build(const std::vector<struct MiddlewareSpec>& specs) const;
    bool contains(const std::string& name) const { return factories_.count(name) > 0; }

    // Pause strategies by name, and classes' strategies declared from C++ (pause_strategy.hpp):
    // kept here so that plugins and embedding programs reach them where they add middleware.
    PauseStrategyRegistry pause_strategies;

  private:
    std::map<std::string, MiddlewareFactory> factories_;
};

}  // namespace kiqd
