#include "fetch/fetch_buffer.hpp"

#include <algorithm>

#include "kiqd/deadline.hpp"

namespace kiqd {

std::vector<UnitOfWork> FetchBuffer::refill_unlocked(std::unique_lock<std::mutex>& lock,
                                                     const Refill& refill) {
    ++refills_;
    std::vector<UnitOfWork> acks = std::move(acks_);
    acks_.clear();
    lock.unlock();
    const auto start = std::chrono::steady_clock::now();
    std::vector<UnitOfWork> got;
    try {
        got = refill(acks);
    } catch (...) {
        lock.lock();
        // Not sent (or not known to be): they go out with the next write; LREM of a job that is
        // already gone does nothing, so sending one twice is harmless.
        for (auto& a : acks) acks_.push_back(std::move(a));
        --refills_;
        lock.unlock();
        cv_.notify_all();
        throw;
    }
    const auto took = std::chrono::steady_clock::now() - start;
    lock.lock();
    --refills_;
    record_refill(took);
    return got;
}

bool FetchBuffer::running_low() const {
    if (refills_ >= max_refills_) return false;
    // Enough to cover three refill times at the measured pace: one refill's wait, and headroom
    // for the pace to grow (a buffer that ran dry measured its supply, not the demand).
    const auto ahead = static_cast<size_t>(3.0 * take_rate_ * refill_seconds_);
    // `<=`: the job about to be taken is still counted, and fewer than that must remain.
    return jobs_.size() + refills_ * batch_ <= std::max(low_water_, ahead);
}

void FetchBuffer::record_refill(std::chrono::steady_clock::duration took) {
    // Moving averages that start at their first sample and weigh each newer one by a quarter.
    auto average = [](double& avg, double sample) {
        avg = avg == 0 ? sample : avg + 0.25 * (sample - avg);
    };
    average(refill_seconds_, std::chrono::duration<double>(took).count());
    const auto now = std::chrono::steady_clock::now();
    const double window = std::chrono::duration<double>(now - sample_start_).count();
    if (window < 0.001) return;  // too short to say more about the clock than about the pace
    average(take_rate_, static_cast<double>(taken_since_sample_) / window);
    taken_since_sample_ = 0;
    sample_start_ = now;
}

std::optional<UnitOfWork> FetchBuffer::take_or_refill(const Refill& refill,
                                                      std::chrono::milliseconds wait,
                                                      bool& drained) {
    drained = false;
    std::unique_lock lock(mutex_);
    const auto deadline = deadline_in(wait);
    // While a refill is on its way, wait for its jobs rather than asking Redis too (which would
    // take N more jobs and leave them buffered behind busy threads) — unless the pace says one
    // refill in flight is not enough.
    while (jobs_.empty() && refills_ > 0 && !running_low()) {
        if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && jobs_.empty())
            return std::nullopt;
    }
    auto take = [&] {
        std::optional<UnitOfWork> unit;
        if (jobs_.empty()) return unit;
        unit = std::move(jobs_.front());
        jobs_.pop_front();
        ++taken_since_sample_;
        return unit;
    };
    // Not running low: take a job and go. Running low: refill first; a job this thread would
    // have taken stays at the front for a thread that is free now, instead of waiting out the
    // round trip with this one.
    if (!jobs_.empty() && !running_low()) return take();
    auto got = refill_unlocked(lock, refill);
    drained = got.empty();
    for (auto& u : got) jobs_.push_back(std::move(u));
    auto unit = take();
    lock.unlock();
    cv_.notify_all();
    drained = drained && !unit;
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

size_t FetchBuffer::refills_in_flight() const {
    std::lock_guard lock(mutex_);
    return refills_;
}

}  // namespace kiqd
