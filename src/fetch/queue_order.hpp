#pragma once
// The order in which a fetch asks Redis for queues, exactly as Sidekiq's BasicFetch builds it
// (docs/data-model.md#fetch-order): strict mode keeps the configured order; weighted mode repeats
// each queue `weight` times, shuffles the whole list uniformly and keeps the first occurrence of
// each name, on every fetch. So queue q comes first with probability weight(q)/Σweights.
// Immutable after construction except for the paused flags (queue pause, pause_control.hpp):
// the pause controller's thread sets them, fetches read them; a paused queue is left out of the
// order as if it were not configured, and so is a queue resting after the app's throttling
// (queue_rests.hpp). Each processor thread passes its own random generator.
#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "kiqd/config.hpp"

namespace kiqd {

class QueueOrder {
  public:
    // Strict when no queue has a weight (Sidekiq 6.4.1's rule); weighted otherwise, with
    // unweighted queues counting as weight 1.
    explicit QueueOrder(std::vector<QueueWeight> queues);

    bool strict() const { return strict_; }
    // Unique queue names in configuration order (what the heartbeat reports).
    const std::vector<std::string>& names() const { return names_; }
    // The weight of names()[index] (1 for an unweighted queue).
    int weight(size_t index) const { return weights_[index]; }
    // Fills `out` with the queue names for one fetch; empty when every queue is paused.
    void order(std::mt19937_64& rng, std::vector<const std::string*>& out) const;

    // Pauses exactly the configured queues named in `queues` (others are ignored).
    void set_paused(const std::unordered_set<std::string>& queues);
    bool paused(size_t index) const { return paused_[index].load(std::memory_order_relaxed); }
    // Every queue paused or resting (queue_rests.hpp): nothing to fetch from now.
    bool all_paused() const;

  private:
    bool strict_ = true;
    std::vector<std::string> names_;
    std::vector<int> weights_;      // by index into names_
    std::vector<size_t> expanded_;  // indices into names_, each repeated weight times
    std::unique_ptr<std::atomic<bool>[]> paused_;  // by index into names_
};

}  // namespace kiqd
