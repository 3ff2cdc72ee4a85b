#include "server/work_state.hpp"

#include <random>

namespace kiqd {
namespace {

std::string base36(unsigned long long v) {
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
    std::string out;
    do {
        out.insert(out.begin(), digits[v % 36]);
        v /= 36;
    } while (v);
    return out;
}

}  // namespace

WorkState::WorkState(size_t slots) {
    std::mt19937_64 rng{std::random_device{}()};
    for (size_t i = 0; i < slots; ++i) {
        auto slot = std::make_unique<Slot>();
        // Random like Sidekiq's (object_id ^ pid) in base 36, plus the index for uniqueness.
        slot->tid = base36(rng() % 1679616) + base36(i);
        slots_.push_back(std::move(slot));
    }
}

void WorkState::begin(size_t slot, RunningJob job) {
    auto& s = *slots_[slot];
    std::lock_guard lock(s.mutex);
    s.job = std::move(job);
    s.abandoned = false;
    busy_.fetch_add(1, std::memory_order_relaxed);
}

size_t WorkState::busy_in(size_t first, size_t count) const {
    size_t busy = 0;
    for (size_t i = first; i < first + count && i < slots_.size(); ++i) {
        std::lock_guard lock(slots_[i]->mutex);
        if (slots_[i]->job && !slots_[i]->abandoned) ++busy;
    }
    return busy;
}

bool WorkState::finish(size_t slot) {
    auto& s = *slots_[slot];
    std::lock_guard lock(s.mutex);
    if (s.abandoned) {
        s.abandoned = false;
        return false;
    }
    s.job.reset();
    busy_.fetch_sub(1, std::memory_order_relaxed);
    return true;
}

std::vector<RunningJob> WorkState::abandon_all() {
    std::vector<RunningJob> out;
    for (auto& s : slots_) {
        std::lock_guard lock(s->mutex);
        if (!s->job) continue;
        out.push_back(std::move(*s->job));
        s->job.reset();
        s->abandoned = true;
        busy_.fetch_sub(1, std::memory_order_relaxed);
    }
    return out;
}

std::vector<WorkState::Entry> WorkState::snapshot() const {
    std::vector<Entry> out;
    for (const auto& s : slots_) {
        std::lock_guard lock(s->mutex);
        if (s->job) out.push_back({&s->tid, *s->job});
    }
    return out;
}

}  // namespace kiqd
