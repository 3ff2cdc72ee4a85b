#include "fetch/queue_order.hpp"

#include <algorithm>

#include "fetch/queue_rests.hpp"

namespace kiqd {

QueueOrder::QueueOrder(std::vector<QueueWeight> queues) {
    strict_ = std::none_of(queues.begin(), queues.end(),
                           [](const QueueWeight& q) { return q.weight > 0; });
    for (const auto& q : queues) {
        if (std::find(names_.begin(), names_.end(), q.name) != names_.end()) continue;
        names_.push_back(q.name);
        const size_t index = names_.size() - 1;
        weights_.push_back(std::max(q.weight, 1));
        for (int i = 0; i < std::max(q.weight, 1); ++i) expanded_.push_back(index);
    }
    paused_ = std::make_unique<std::atomic<bool>[]>(names_.size());
}

bool QueueOrder::all_paused() const {
    const bool rests = queue_rests().any();
    for (size_t i = 0; i < names_.size(); ++i)
        if (!paused(i) && !(rests && queue_rests().resting(names_[i]))) return false;
    return true;
}

void QueueOrder::set_paused(const std::unordered_set<std::string>& queues) {
    for (size_t i = 0; i < names_.size(); ++i)
        paused_[i].store(queues.count(names_[i]) > 0, std::memory_order_relaxed);
}

void QueueOrder::order(std::mt19937_64& rng, std::vector<const std::string*>& out) const {
    out.clear();
    // A queue resting after the app's throttling (queue_rests.hpp) is left out like a paused one.
    const bool rests = queue_rests().any();
    const auto left_out = [&](size_t i) {
        return paused(i) || (rests && queue_rests().resting(names_[i]));
    };
    if (strict_) {
        for (size_t i = 0; i < names_.size(); ++i)
            if (!left_out(i)) out.push_back(&names_[i]);
        return;
    }
    // Fisher–Yates over a copy of the expanded list, stopping as soon as every queue has been
    // placed: the prefix of a uniform shuffle is itself uniform, so the result is the same as
    // Sidekiq's shuffle-then-uniq, without shuffling the tail.
    thread_local std::vector<size_t> scratch;
    thread_local std::vector<char> seen;
    scratch = expanded_;
    seen.assign(names_.size(), 0);
    size_t active = names_.size();
    for (size_t q = 0; q < names_.size(); ++q) {
        if (left_out(q)) {
            seen[q] = 1;  // as if already placed: left out of the order
            --active;
        }
    }
    for (size_t i = 0; i < scratch.size() && out.size() < active; ++i) {
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
