#pragma once
// The client-middleware chain: code that runs around every push made through a kiqd Client
// (client.hpp), with the shape of Sidekiq's client middleware. A middleware sees the job hash
// after it was normalised (class, args, queue, jid, retry, created_at filled in; `at` still
// present for a scheduled job) and before it reaches Redis; it may change it (the queue too),
// call next() to go on, or return without calling next() to stop the push (Sidekiq: return
// without yielding). It may use the pusher's Redis connection. An exception fails the push.
//
// A chain is built once (Launcher, `kiqd enqueue`) and then only read, by any number of threads
// at once: middlewares must be const-callable and keep per-push state on the stack.
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "kiqd/redis/connection.hpp"

namespace kiqd {

using ClientNext = std::function<void()>;

class ClientMiddleware {
  public:
    virtual ~ClientMiddleware() = default;
    virtual std::string_view name() const = 0;
    // Call next() at most once; not calling it stops the push of this job.
    virtual void call(nlohmann::ordered_json& job, redis::Connection& redis,
                      const ClientNext& next) const = 0;
};

class ClientMiddlewareChain {
  public:
    void add(std::shared_ptr<const ClientMiddleware> m) { entries_.push_back(std::move(m)); }
    void prepend(std::shared_ptr<const ClientMiddleware> m) {
        entries_.insert(entries_.begin(), std::move(m));
    }
    // Runs every middleware on `job`; true when the end of the chain was reached (push it).
    bool invoke(nlohmann::ordered_json& job, redis::Connection& redis) const;
    std::vector<std::string> names() const;
    bool empty() const { return entries_.empty(); }

  private:
    void invoke_from(size_t i, nlohmann::ordered_json& job, redis::Connection& redis,
                     bool& reached) const;
    std::vector<std::shared_ptr<const ClientMiddleware>> entries_;
};

}  // namespace kiqd
