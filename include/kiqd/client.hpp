#pragma once
// Client: pushes jobs exactly as Sidekiq's Ruby client does (sidekiq-data-model §2, §3):
// fills jid/created_at/enqueued_at/retry/queue, then SADD queues + LPUSH queue:<q> in one
// pipeline, or ZADD schedule <at> for a job with a future "at" (stored without "at" and
// without "enqueued_at"). Stateless apart from its configuration; shared by all threads.
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kiqd/clock.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd {

class Client {
  public:
    Client(Keys keys, Compat compat) : keys_(std::move(keys)), compat_(compat) {}

    struct Prepared {
        std::string queue;
        std::string jid;
        std::string payload;
        std::optional<double> at;  // set: goes to "schedule" with this score
    };
    // Validates and completes a job hash ("class" required, "args" an array). Throws
    // std::invalid_argument with a message naming the field.
    Prepared prepare(nlohmann::ordered_json item) const;
    std::vector<redis::Command> push_commands(const std::vector<Prepared>& jobs) const;

    std::string push(redis::Connection& conn, nlohmann::ordered_json item) const;  // → jid
    std::vector<std::string> push_bulk(redis::Connection& conn,
                                       std::vector<nlohmann::ordered_json> items) const;

    // Routing (worker_catalog.hpp): the queue of a job pushed without a "queue", by its class;
    // nullopt (or no router) = "default". E.g. set_router([&catalog](const std::string& c) {
    // return catalog.routed_queue(c); }).
    using Router = std::function<std::optional<std::string>(const std::string& job_class)>;
    void set_router(Router router) { router_ = std::move(router); }

  private:
    Router router_;
    Keys keys_;  // a copy: a Client may outlive the Keys it was given
    Compat compat_;
};

}  // namespace kiqd
