#include "kiqd/fetch_buffer.hpp"

namespace kiqd {

std::vector<UnitOfWork> FetchBuffer::refill_unlocked(std::unique_lock<std::mutex>& lock,
                                                     const Refill& refill,
                                                     std::optional<UnitOfWork>& taken) {
    refilling_ = true;
    std::vector<UnitOfWork> acks = std::move(acks_);
    acks_.clear();
    lock.unlock();
    std::vector<UnitOfWork> got;
    try {
        got = refill(acks);
    } catch (...) {
        lock.lock();
        // Not sent (or not known to be): they go out with the next write; LREM of a job that is
        // already gone does nothing, so sending one twice is harmless.
        for (auto& a : acks) acks_.push_back(std::move(a));
        if (taken) jobs_.push_front(std::move(*taken));  // not lost: the next taker gets it
        refilling_ = false;
        lock.unlock();
        cv_.notify_all();
        throw;
    }
    lock.lock();
    refilling_ = false;
    return got;
}

std::optional<UnitOfWork> FetchBuffer::take_or_refill(const Refill& refill,
                                                      std::chrono::milliseconds wait,
                                                      bool& drained) {
    drained = false;
    std::unique_lock lock(mutex_);
    const auto deadline = std::chrono::steady_clock::now() + wait;
    // One refill at a time: the others wait for its jobs rather than asking Redis too (which
    // would take N more jobs each and leave them buffered behind busy threads).
    while (jobs_.empty() && refilling_) {
        if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && jobs_.empty())
            return std::nullopt;
    }
    std::optional<UnitOfWork> unit;
    if (!jobs_.empty()) {
        unit = std::move(jobs_.front());
        jobs_.pop_front();
        // Running low: refill ahead, so that the round trip overlaps the other threads' work
        // on what is left instead of every thread waiting for it (matters with a slow link:
        // at +1 ms per round trip, a refill takes as long as ~50 no-op jobs).
        if (jobs_.size() >= low_water_ || refilling_) return unit;
    }
    for (auto& u : refill_unlocked(lock, refill, unit)) {
        if (!unit)
            unit = std::move(u);
        else
            jobs_.push_back(std::move(u));
    }
    lock.unlock();
    cv_.notify_all();
    drained = !unit;
    return unit;
}

void FetchBuffer::defer_ack(UnitOfWork unit) {
    std::lock_guard lock(mutex_);
    acks_.push_back(std::move(unit));
}

std::vector<UnitOfWork> FetchBuffer::take_buffered() {
    std::lock_guard lock(mutex_);
    std::vector<UnitOfWork> out(std::make_move_iterator(jobs_.begin()),
                                std::make_move_iterator(jobs_.end()));
    jobs_.clear();
    return out;
}

std::vector<UnitOfWork> FetchBuffer::take_acks() {
    std::lock_guard lock(mutex_);
    std::vector<UnitOfWork> out = std::move(acks_);
    acks_.clear();
    return out;
}

void FetchBuffer::restore_acks(std::vector<UnitOfWork> acks) {
    std::lock_guard lock(mutex_);
    for (auto& a : acks) acks_.push_back(std::move(a));
}

std::vector<std::string> FetchBuffer::held_payloads() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    out.reserve(jobs_.size() + acks_.size());
    for (const auto& u : jobs_) out.push_back(u.payload);
    for (const auto& u : acks_) out.push_back(u.payload);
    return out;
}

size_t FetchBuffer::buffered() const {
    std::lock_guard lock(mutex_);
    return jobs_.size();
}

}  // namespace kiqd
