#include "fetch/fetch_buffer.hpp"

#include <algorithm>

#include "kiqd/deadline.hpp"

namespace kiqd {

FetchBuffer::FetchBuffer(size_t batch, size_t max_refills, size_t threads)
    : batch_(batch), low_water_(batch / 2), max_refills_(max_refills < 1 ? 1 : max_refills) {
    for (size_t i = 0; i < threads; ++i) piles_.push_back(std::make_unique<Pile>());
}

FetchBuffer::~FetchBuffer() = default;

size_t FetchBuffer::Pile::limit() const {
    if (!short_jobs()) return 1;
    // About kPileWork of work: no-op jobs (~5 µs) take a whole refill, jobs of 250 µs two.
    const double fits = kPileWork / std::max(job_seconds, 1e-7);
    return std::clamp<size_t>(static_cast<size_t>(fits), 1, kMaxPile);
}

std::optional<UnitOfWork> FetchBuffer::steal(Pile* thief) {
    std::optional<UnitOfWork> unit;
    if (piled_.load(std::memory_order_relaxed) == 0) return unit;
    std::vector<UnitOfWork> taken;
    for (auto& p : piles_) {
        if (p.get() == thief) continue;
        std::lock_guard pile_lock(p->mutex);
        if (p->jobs.empty()) continue;
        // The newer half (its owner runs the older ones first); one job when there is no pile
        // to put the rest in.
        const size_t n = thief ? (p->jobs.size() + 1) / 2 : 1;
        const auto from = p->jobs.end() - static_cast<std::ptrdiff_t>(n);
        for (auto it = from; it != p->jobs.end(); ++it) taken.push_back(std::move(*it));
        p->jobs.erase(from, p->jobs.end());
        break;
    }
    if (taken.empty()) return unit;
    unit = std::move(taken.front());
    piled_.fetch_sub(1, std::memory_order_relaxed);  // the rest stay piled, in the thief's pile
    if (taken.size() > 1) {
        std::lock_guard pile_lock(thief->mutex);
        for (size_t i = 1; i < taken.size(); ++i) thief->jobs.push_back(std::move(taken[i]));
    }
    return unit;
}

void FetchBuffer::share_acks(Pile* pile) {
    if (!pile) return;
    std::lock_guard pile_lock(pile->mutex);
    if (pile->acks.empty()) return;
    requeue_acks(pile->acks, pile->acks_since);
    pile->acks.clear();
}

void FetchBuffer::requeue_acks(std::vector<UnitOfWork>& acks,
                               std::chrono::steady_clock::time_point since) {
    if (acks.empty()) return;
    acks_since_ = acks_.empty() ? since : std::min(acks_since_, since);
    for (auto& a : acks) acks_.push_back(std::move(a));
}

std::optional<UnitOfWork> FetchBuffer::take_locked(Pile* pile) {
    if (jobs_.empty()) return steal(pile);
    std::optional<UnitOfWork> unit = std::move(jobs_.front());
    jobs_.pop_front();
    ++taken_since_sample_;
    // Other threads wait for jobs and this thread's jobs are short: take a few more, so that
    // this wake-up (or lock) serves several jobs.
    if (!pile || waiting_ == 0) return unit;
    const size_t limit = pile->limit();
    if (limit <= 1) return unit;
    std::lock_guard pile_lock(pile->mutex);
    while (pile->jobs.size() + 1 < limit && !jobs_.empty()) {
        pile->jobs.push_back(std::move(jobs_.front()));
        jobs_.pop_front();
        ++taken_since_sample_;
        piled_.fetch_add(1, std::memory_order_relaxed);
    }
    return unit;
}

std::vector<UnitOfWork> FetchBuffer::refill_unlocked(std::unique_lock<std::mutex>& lock,
                                                     const Refill& refill) {
    ++refills_;
    std::vector<UnitOfWork> acks = std::move(acks_);
    acks_.clear();
    const auto acks_since = acks_since_;
    lock.unlock();
    const auto start = std::chrono::steady_clock::now();
    std::vector<UnitOfWork> got;
    try {
        got = refill(acks);
    } catch (...) {
        lock.lock();
        // Not sent (or not known to be): they go out with the next write; LREM of a job that is
        // already gone does nothing, so sending one twice is harmless.
        requeue_acks(acks, acks_since);
        --refills_;
        const Wake all = pick_waiters(waiting_);
        lock.unlock();
        notify(all);
        if (!acks.empty()) first_ack_deferred();
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
                                                      std::chrono::milliseconds wait, bool& drained,
                                                      size_t slot) {
    drained = false;
    Pile* pile = pile_of(slot);
    if (!pile) return take_or_refill_unlocked(refill, wait, drained, nullptr);
    const auto now = std::chrono::steady_clock::now();
    if (pile->last != std::chrono::steady_clock::time_point{}) {
        pile->job_seconds +=
            0.1 * (std::chrono::duration<double>(now - pile->last).count() - pile->job_seconds);
        pile->measured = true;
    }
    auto unit = take_or_refill_unlocked(refill, wait, drained, pile);
    pile->last = unit ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    return unit;
}

std::optional<UnitOfWork> FetchBuffer::take_or_refill_unlocked(const Refill& refill,
                                                               std::chrono::milliseconds wait,
                                                               bool& drained, Pile* pile) {
    if (pile && piled_.load(std::memory_order_relaxed) > 0) {
        std::lock_guard pile_lock(pile->mutex);
        if (!pile->jobs.empty()) {
            std::optional<UnitOfWork> unit = std::move(pile->jobs.front());
            pile->jobs.pop_front();
            piled_.fetch_sub(1, std::memory_order_relaxed);
            return unit;
        }
    }
    std::unique_lock lock(mutex_);
    share_acks(pile);
    const auto deadline = deadline_in(wait);
    // While a refill is on its way, wait for its jobs rather than asking Redis too (which would
    // take N more jobs and leave them buffered behind busy threads) — unless the pace says one
    // refill in flight is not enough. A job in another thread's pile is taken first.
    while (jobs_.empty() && refills_ > 0 && !running_low()) {
        if (auto stolen = steal(pile)) return stolen;
        const auto status = park(lock, pile, deadline);
        if (status == std::cv_status::timeout && jobs_.empty()) return steal(pile);
    }
    // Not running low: take a job and go. Running low: refill first; a job this thread would
    // have taken stays at the front for a thread that is free now, instead of waiting out the
    // round trip with this one.
    if (!jobs_.empty() && !running_low()) return take_locked(pile);
    auto got = refill_unlocked(lock, refill);
    drained = got.empty();
    for (auto& u : got) jobs_.push_back(std::move(u));
    auto unit = take_locked(pile);
    // Wake as many waiters as there are jobs for, not all of them: at c100 a broadcast per
    // refill of 50 woke ~100 threads, half of which found nothing and slept again. While jobs
    // are short a woken thread takes a pile, so one wakes per pile. The rest wake at the
    // next refill, which a woken thread starts when it finds the buffer low. With nothing
    // buffered and nothing in flight one waiter wakes to refill (this thread runs its pile
    // meanwhile), and its refill wakes the others as its jobs need; only when every queue was
    // empty does every waiter wake, to block on a queue itself. (Waking all whenever the
    // buffer was empty woke 99 threads at c100 each time this thread piled a whole refill.)
    const size_t per = pile ? pile->limit() : 1;
    size_t wake = std::min(waiting_, (jobs_.size() + per - 1) / per);
    if (jobs_.empty() && refills_ == 0) wake = drained ? waiting_ : std::min<size_t>(waiting_, 1);
    const Wake woken = pick_waiters(wake);
    lock.unlock();
    notify(woken);
    drained = drained && !unit;
    return unit;
}

std::cv_status FetchBuffer::park(std::unique_lock<std::mutex>& lock, Pile* pile,
                                 std::chrono::steady_clock::time_point deadline) {
    ++waiting_;
    auto status = std::cv_status::no_timeout;
    if (pile) {
        pile->woken = false;
        parked_.push_back(pile);
        // Only pick_waiters ends the wait early (a late notify from an earlier wait is spurious).
        while (!pile->woken && status == std::cv_status::no_timeout)
            status = pile->cv.wait_until(lock, deadline);
        if (!pile->woken) parked_.erase(std::find(parked_.begin(), parked_.end(), pile));
    } else {
        ++shared_waiting_;
        status = cv_.wait_until(lock, deadline);
        --shared_waiting_;
    }
    --waiting_;
    return status;
}

FetchBuffer::Wake FetchBuffer::pick_waiters(size_t n) {
    Wake wake;
    while (n > 0 && !parked_.empty()) {
        Pile* p = parked_.back();
        parked_.pop_back();
        p->woken = true;
        wake.piles.push_back(p);
        --n;
    }
    wake.shared = std::min(n, shared_waiting_);
    wake.all_shared = wake.shared > 0 && wake.shared == shared_waiting_;
    return wake;
}

void FetchBuffer::notify(const Wake& wake) {
    for (Pile* p : wake.piles) p->cv.notify_one();
    if (wake.all_shared)
        cv_.notify_all();
    else
        for (size_t i = 0; i < wake.shared; ++i) cv_.notify_one();
}

bool FetchBuffer::defer_ack(UnitOfWork unit, size_t slot) {
    const auto now = std::chrono::steady_clock::now();
    bool first = false;
    if (Pile* pile = pile_of(slot)) {
        // A job that ran kAckDelay or longer, on a thread whose jobs are not short: its own
        // round trip costs little beside it, and deferred it would wait for the watcher. (A
        // short job that only took long because its thread waited for a core still rides with
        // the refill: under load that is most of them, and a round trip each would slow a
        // drain of short jobs.)
        const auto taken = pile->last;
        if (!pile->short_jobs() && taken != std::chrono::steady_clock::time_point{} &&
            now - taken >= kAckDelay)
            return false;
        // The thread's own list: no shared lock per job (share_acks moves it on).
        std::lock_guard pile_lock(pile->mutex);
        first = pile->acks.empty();
        if (first) pile->acks_since = now;
        pile->acks.push_back(std::move(unit));
    } else {
        std::lock_guard lock(mutex_);
        first = acks_.empty();
        if (first) acks_since_ = now;
        acks_.push_back(std::move(unit));
    }
    // Only a list that was empty can find the watcher idle: it goes idle only when every list
    // is empty, and the deferral that ended that is the one that woke it.
    if (first) first_ack_deferred();
    return true;
}

void FetchBuffer::first_ack_deferred() {
    // Orders the deferral above before the read of ack_idle_, as ack_watcher_idle() orders its
    // store before its look at the lists: one of the two sees the other.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (ack_idle_.load(std::memory_order_relaxed) && ack_idle_.exchange(false) && ack_wake_)
        ack_wake_();
}

std::optional<std::chrono::steady_clock::time_point> FetchBuffer::oldest_ack() const {
    std::optional<std::chrono::steady_clock::time_point> oldest;
    std::lock_guard lock(mutex_);
    if (!acks_.empty()) oldest = acks_since_;
    for (const auto& p : piles_) {
        std::lock_guard pile_lock(p->mutex);
        if (!p->acks.empty() && (!oldest || p->acks_since < *oldest)) oldest = p->acks_since;
    }
    return oldest;
}

bool FetchBuffer::ack_watcher_idle() {
    ack_idle_.store(true);  // seq_cst: before the look at the lists (first_ack_deferred)
    if (!oldest_ack()) return true;
    ack_idle_.store(false);
    return false;
}

std::vector<UnitOfWork> FetchBuffer::take_buffered() {
    std::lock_guard lock(mutex_);
    // Piled jobs were fetched before the shared buffer's: they come first.
    std::vector<UnitOfWork> out;
    for (auto& p : piles_) {
        std::lock_guard pile_lock(p->mutex);
        for (auto& u : p->jobs) out.push_back(std::move(u));
        piled_.fetch_sub(p->jobs.size(), std::memory_order_relaxed);
        p->jobs.clear();
    }
    for (auto& u : jobs_) out.push_back(std::move(u));
    jobs_.clear();
    return out;
}

std::vector<UnitOfWork> FetchBuffer::take_acks() {
    std::lock_guard lock(mutex_);
    for (auto& p : piles_) share_acks(p.get());
    std::vector<UnitOfWork> out = std::move(acks_);
    acks_.clear();
    return out;
}

void FetchBuffer::put_back(UnitOfWork unit) {
    std::lock_guard lock(mutex_);
    jobs_.push_front(std::move(unit));
}

void FetchBuffer::restore_acks(std::vector<UnitOfWork> acks) {
    if (acks.empty()) return;
    {
        std::lock_guard lock(mutex_);
        requeue_acks(acks, std::chrono::steady_clock::now());
    }
    first_ack_deferred();
}

std::vector<std::string> FetchBuffer::held_payloads() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    out.reserve(jobs_.size() + acks_.size());
    for (const auto& u : jobs_) out.push_back(u.payload);
    for (const auto& p : piles_) {
        std::lock_guard pile_lock(p->mutex);
        for (const auto& u : p->jobs) out.push_back(u.payload);
        for (const auto& u : p->acks) out.push_back(u.payload);
    }
    for (const auto& u : acks_) out.push_back(u.payload);
    return out;
}

size_t FetchBuffer::buffered() const {
    std::lock_guard lock(mutex_);
    return jobs_.size() + piled_.load(std::memory_order_relaxed);
}

size_t FetchBuffer::waiting() const {
    std::lock_guard lock(mutex_);
    return waiting_;
}

size_t FetchBuffer::refills_in_flight() const {
    std::lock_guard lock(mutex_);
    return refills_;
}

}  // namespace kiqd
