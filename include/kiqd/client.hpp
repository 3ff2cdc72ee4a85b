#pragma once
// Client: pushes jobs exactly as Sidekiq's Ruby client does
// (docs/data-model.md#queues-and-the-queues-set, #job-payload): normalises the job hash (jid,
// created_at, retry, queue — the class's `queue:` from the YAML `handlers:` entry, else "default"),
// runs it through the client-middleware chain (client_middleware.hpp; a middleware may change it or
// stop the push), then SADD queues + LPUSH queue:<q> in one pipeline (with enqueued_at), or ZADD
// schedule <at> for a job with a future "at" (stored without "at" and without "enqueued_at"). Bulk
// pushes run the chain per job and send every accepted job in one pipeline (one LPUSH per queue, as
// Ruby's push_bulk).
//
// make_process_client() builds the client a kiqd process uses — for handlers' follow-up jobs
// (JobContext::enqueue) and `kiqd enqueue` — with kiqd's standard chain (fair-tenant
// rerouting, fair_tenant.hpp). Immutable after construction; shared by all threads, each
// pushing on its own connection.
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kiqd/client_middleware.hpp"
#include "kiqd/clock.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd {

struct Config;

class Client {
  public:
    Client(Keys keys, Compat compat) : keys_(std::move(keys)), compat_(compat) {}
    // `class_queues`: job class → its default queue (the YAML `queue:` of a handlers entry).
    Client(Keys keys, Compat compat, ClientMiddlewareChain chain,
           std::map<std::string, std::string> class_queues = {})
        : keys_(std::move(keys)),
          compat_(compat),
          chain_(std::move(chain)),
          class_queues_(std::move(class_queues)) {}

    struct Prepared {
        std::string queue;
        std::string jid;
        std::string payload;
        std::optional<double> at;  // set: goes to "schedule" with this score
    };
    // Validates and fills in a job hash as Sidekiq's normalize_item does ("class" required,
    // "args" an array; queue, retry, jid, created_at defaulted). Throws std::invalid_argument
    // with a message naming the field.
    nlohmann::ordered_json normalize(nlohmann::ordered_json item) const;
    // The payload to store: normalize() plus enqueued_at / the `at` schedule. No middleware.
    Prepared prepare(nlohmann::ordered_json item) const;
    std::vector<redis::Command> push_commands(const std::vector<Prepared>& jobs) const;

    // Normalise → client middleware → push. Returns the jid, or "" when a middleware stopped
    // the push. Throws std::invalid_argument for a malformed job, redis::Error from Redis.
    std::string push(redis::Connection& conn, nlohmann::ordered_json item) const;
    // The same for many jobs in one pipeline; the result is aligned with `items` ("" where a
    // middleware stopped the push).
    std::vector<std::string> push_bulk(redis::Connection& conn,
                                       std::vector<nlohmann::ordered_json> items) const;

    // Routing (worker_catalog.hpp): the queue of a job pushed without a "queue", by its class,
    // before the class's own `queue:`; nullopt (or no router) = the class's queue, else
    // "default". E.g. set_router([&catalog](const std::string& c) {
    // return catalog.routed_queue(c); }).
    using Router = std::function<std::optional<std::string>(const std::string& job_class)>;
    void set_router(Router router) { router_ = std::move(router); }

    const ClientMiddlewareChain& chain() const { return chain_; }
    const Keys& keys() const { return keys_; }

  private:
    Prepared finish(nlohmann::ordered_json item) const;

    Router router_;
    Keys keys_;  // a copy: a Client may outlive the Keys it was given
    Compat compat_;
    ClientMiddlewareChain chain_;
    std::map<std::string, std::string> class_queues_;
};

// The client of a kiqd process: the config's key prefix, payload compat and per-class queues,
// `routing_rules:` (as a router over the YAML's worker metadata), and kiqd's client middleware
// (fair-tenant rerouting from job options and `handlers:`).
// Copies what it needs: it does not keep a reference to `config`.
Client make_process_client(const Config& config);

}  // namespace kiqd
