#pragma once
// Fetchers take jobs off the queues. BasicFetcher is Sidekiq's BasicFetch: BRPOP over the
// queue order of this fetch with a 2 s timeout (so threads notice quiet/stop), acknowledge does
// nothing, requeue is RPUSH of the original string to the front of the line. The interface
// leaves room for a reliable fetcher whose acknowledge/requeue are real Redis commands.
// A fetcher is shared by all processor threads; each thread passes its own connection and RNG.
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kiqd/keys.hpp"
#include "kiqd/queue_order.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd {

struct UnitOfWork {
    std::string queue;    // without the "queue:" prefix
    std::string payload;  // as popped, byte for byte
};

class Fetcher {
  public:
    virtual ~Fetcher() = default;
    // Blocks for at most ~2 s; nullopt when every queue stayed empty. Throws redis::Error.
    virtual std::optional<UnitOfWork> retrieve_work(redis::Connection& conn,
                                                    std::mt19937_64& rng) const = 0;
    // Commands to send together with the job's outcome (none for basic fetch).
    virtual std::vector<redis::Command> acknowledge_commands(const UnitOfWork&) const { return {}; }
    // Puts jobs back at the front of their queues, grouped into one RPUSH per queue.
    virtual std::vector<redis::Command> requeue_commands(
        const std::vector<UnitOfWork>& units) const = 0;
};

class BasicFetcher final : public Fetcher {
  public:
    static constexpr int kTimeoutSeconds = 2;  // Sidekiq's BasicFetch::TIMEOUT

    BasicFetcher(const Keys& keys, const QueueOrder& order) : keys_(keys), order_(order) {}
    std::optional<UnitOfWork> retrieve_work(redis::Connection& conn,
                                            std::mt19937_64& rng) const override;
    std::vector<redis::Command> requeue_commands(
        const std::vector<UnitOfWork>& units) const override;

  private:
    const Keys& keys_;
    const QueueOrder& order_;
};

}  // namespace kiqd
