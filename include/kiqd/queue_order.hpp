#pragma once
// The order in which a fetch asks Redis for queues, exactly as Sidekiq's BasicFetch builds it
// (sidekiq-data-model §4): strict mode keeps the configured order; weighted mode repeats each
// queue `weight` times, shuffles the whole list uniformly and keeps the first occurrence of
// each name, on every fetch. So queue q comes first with probability weight(q)/Σweights.
// Immutable after construction; each processor thread passes its own random generator.
#include <random>
#include <string>
#include <vector>

namespace kiqd {

struct QueueWeight {
    std::string name;
    int weight = 0;  // 0 = given without a weight
};

class QueueOrder {
  public:
    // Strict when no queue has a weight (Sidekiq 6.4.1's rule); weighted otherwise, with
    // unweighted queues counting as weight 1.
    explicit QueueOrder(std::vector<QueueWeight> queues);

    bool strict() const { return strict_; }
    // Unique queue names in configuration order (what the heartbeat reports).
    const std::vector<std::string>& names() const { return names_; }
    // Fills `out` with the queue names for one fetch.
    void order(std::mt19937_64& rng, std::vector<const std::string*>& out) const;

  private:
    bool strict_ = true;
    std::vector<std::string> names_;
    std::vector<size_t> expanded_;  // indices into names_, each repeated weight times
};

}  // namespace kiqd
