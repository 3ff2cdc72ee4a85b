#include "fetch/fetch_combiner.hpp"

namespace kiqd {

std::optional<UnitOfWork> FetchCombiner::take(const Fetch& fetch) {
    std::unique_lock lock(mutex_);
    // A round is open until its leader starts it; a thread that comes later joins the next.
    if (!open_ || open_->joined >= max_round_) open_ = std::make_shared<Round>();
    const std::shared_ptr<Round> round = open_;
    const size_t mine = round->joined++;
    if (mine > 0) {
        round->cv.wait(lock, [&] { return round->done; });
        if (mine >= round->got.size()) return std::nullopt;
        ++handed_;
        return std::move(round->got[mine]);
    }
    // The leader: waits while max_in_flight_ calls are out, so that a round gathers every
    // thread that asked while Redis was busy with them.
    cv_.wait(lock, [&] { return in_flight_ < max_in_flight_; });
    if (open_ == round) open_.reset();
    ++in_flight_;
    round->wanted = round->joined;
    ++rounds_;
    lock.unlock();
    std::vector<UnitOfWork> got;
    try {
        got = fetch(round->wanted);
    } catch (...) {
        lock.lock();
        finish(*round, lock);
        throw;
    }
    lock.lock();
    round->got = std::move(got);
    std::optional<UnitOfWork> mine_first;
    if (!round->got.empty()) {
        ++handed_;
        mine_first = std::move(round->got[0]);
    }
    finish(*round, lock);
    return mine_first;
}

void FetchCombiner::finish(Round& round, std::unique_lock<std::mutex>& lock) {
    --in_flight_;
    round.done = true;
    lock.unlock();
    // Only this round's threads wake (each waits on its round's own condition), and one leader
    // waiting for the call slot just freed: a wake-up per job, as a BRPOP's reply is.
    round.cv.notify_all();
    cv_.notify_one();
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
