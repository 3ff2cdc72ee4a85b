#include "common/periodic_worker.hpp"

#include <pthread.h>

#include <stdexcept>

namespace kiqd {

PeriodicWorker::PeriodicWorker(std::string name, spdlog::logger& log)
    : name_(std::move(name)), log_(log) {}

PeriodicWorker::~PeriodicWorker() {
    stop();
}

void PeriodicWorker::start(Duration first_wait, Interval interval, Round round) {
    {
        std::lock_guard lock(mutex_);
        if (stop_) return;
    }
    if (thread_.joinable()) throw std::logic_error(name_ + ": started twice");
    round_ = std::move(round);
    interval_ = std::move(interval);
    thread_ = std::thread([this, first_wait] { run(first_wait); });
}

void PeriodicWorker::start(Duration first_wait, Duration interval, Round round) {
    start(
        first_wait, [interval] { return interval; }, std::move(round));
}

void PeriodicWorker::wake() {
    {
        std::lock_guard lock(mutex_);
        woken_ = true;
    }
    cv_.notify_all();
}

bool PeriodicWorker::stop() noexcept {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    cv_.notify_all();
    if (!thread_.joinable()) return false;
    thread_.join();
    return true;
}

void PeriodicWorker::run(Duration first_wait) noexcept {
    // Linux limits a thread name to 15 characters; it shows in top -H, ps -L and gdb.
    pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
    if (first_wait > Duration::zero() && !sleep(first_wait)) return;
    do {
        run_round();
    } while (sleep(interval_()));
}

void PeriodicWorker::run_round() noexcept {
    try {
        round_();
    } catch (const std::exception& e) {
        log_.error("{}: round failed: {}", name_, e.what());
    } catch (...) {
        log_.error("{}: round failed: unknown exception", name_);
    }
}

bool PeriodicWorker::sleep(Duration d) {
    std::unique_lock lock(mutex_);
    // wait_until a saturated deadline, not wait_for: wait_for adds `d` to now unchecked.
    cv_.wait_until(lock, deadline_in(d), [this] { return stop_ || woken_; });
    woken_ = false;
    return !stop_;
}

}  // namespace kiqd
