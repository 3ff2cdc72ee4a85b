#include "fetch/fetch_combiner.hpp"

namespace kiqd {

std::optional<UnitOfWork> FetchCombiner::take(const Fetch& fetch) {
    std::unique_lock lock(mutex_);
    // A round is open until its leader starts it; a thread that comes later joins the next.
    if (!open_ || open_->joined >= max_round_) open_ = std::make_shared<Round>();
    const std::shared_ptr<Round> round = open_;
    const size_t mine = round->joined++;
    if (mine > 0) {
        cv_.wait(lock, [&] { return round->done; });
        if (mine >= round->got.size()) return std::nullopt;
        ++handed_;
        return std::move(round->got[mine]);
    }
    // The leader: the previous round's call first, so that a round gathers every thread that
    // asked while Redis was busy with it.
    cv_.wait(lock, [&] { return !in_flight_; });
    if (open_ == round) open_.reset();
    in_flight_ = true;
    round->wanted = round->joined;
    ++rounds_;
    lock.unlock();
    std::vector<UnitOfWork> got;
    try {
        got = fetch(round->wanted);
    } catch (...) {
        lock.lock();
        in_flight_ = false;
        round->done = true;
        cv_.notify_all();
        throw;
    }
    lock.lock();
    in_flight_ = false;
    round->got = std::move(got);
    round->done = true;
    cv_.notify_all();
    if (round->got.empty()) return std::nullopt;
    ++handed_;
    return std::move(round->got[0]);
}

size_t FetchCombiner::rounds() const {
    std::lock_guard lock(mutex_);
    return rounds_;
}

size_t FetchCombiner::handed() const {
    std::lock_guard lock(mutex_);
    return handed_;
}

size_t FetchCombiner::joined() const {
    std::lock_guard lock(mutex_);
    return open_ ? open_->joined : 0;
}

}  // namespace kiqd
