#include "kiqd/queue_order.hpp"

#include <algorithm>

namespace kiqd {

QueueOrder::QueueOrder(std::vector<QueueWeight> queues) {
    strict_ = std::none_of(queues.begin(), queues.end(),
                           [](const QueueWeight& q) { return q.weight > 0; });
    for (const auto& q : queues) {
        if (std::find(names_.begin(), names_.end(), q.name) != names_.end()) continue;
        names_.push_back(q.name);
        const size_t index = names_.size() - 1;
        for (int i = 0; i < std::max(q.weight, 1); ++i) expanded_.push_back(index);
    }
}

void QueueOrder::order(std::mt19937_64& rng, std::vector<const std::string*>& out) const {
    out.clear();
    if (strict_) {
        for (const auto& n : names_) out.push_back(&n);
        return;
    }
    // Fisher–Yates over a copy of the expanded list, stopping as soon as every queue has been
    // placed: the prefix of a uniform shuffle is itself uniform, so the result is the same as
    // Sidekiq's shuffle-then-uniq, without shuffling the tail.
    thread_local std::vector<size_t> scratch;
    thread_local std::vector<char> seen;
    scratch = expanded_;
    seen.assign(names_.size(), 0);
    for (size_t i = 0; i < scratch.size() && out.size() < names_.size(); ++i) {
        std::uniform_int_distribution<size_t> pick(i, scratch.size() - 1);
        std::swap(scratch[i], scratch[pick(rng)]);
        const size_t q = scratch[i];
        if (!seen[q]) {
            seen[q] = 1;
            out.push_back(&names_[q]);
        }
    }
}

}  // namespace kiqd
