#include "server/manager.hpp"

#include <algorithm>

#include "fetch/cpu_gate.hpp"

namespace kiqd {

Manager::Manager(Runtime& rt) : rt_(rt) {
    for (size_t i = 0; i < rt.work.slots(); ++i) {
        processors_.push_back(std::make_unique<Processor>(rt, i, [this] {
            {
                std::lock_guard lock(mutex_);
                --alive_;
            }
            cv_.notify_all();
        }));
    }
}

Manager::~Manager() {
    for (auto& p : processors_) {
        if (p->running())
            p->detach();  // stuck in a handler; the process is exiting anyway
        else
            p->join();
    }
}

void Manager::start() {
    {
        std::lock_guard lock(mutex_);
        alive_ = processors_.size();
    }
    for (auto& p : processors_) p->start();
}

size_t Manager::alive() const {
    std::lock_guard lock(mutex_);
    return alive_;
}

void Manager::quiet() noexcept {
    rt_.lifecycle.quiet();
}

bool Manager::wait_all_until(Clock::time_point until,
                             const std::function<Clock::time_point()>* moving) {
    std::unique_lock lock(mutex_);
    for (;;) {
        if (alive_ == 0) return true;
        const auto limit = moving ? std::min(until, (*moving)()) : until;
        if (Clock::now() >= limit) return false;
        // Wake at least every 100 ms so that a deadline moved by a second signal is seen.
        cv_.wait_until(lock, std::min(limit, Clock::now() + std::chrono::milliseconds(100)));
    }
}

void Manager::requeue_running_jobs() {
    auto running = rt_.work.abandon_all();
    // Jobs still in the fetch buffer and cpu-bound jobs still waiting for a slot go back too
    // (behind the running ones, which were fetched first); they never started, so they are not
    // counted as interrupted.
    auto buffered = rt_.fetcher.take_buffered();
    std::reverse(buffered.begin(), buffered.end());
    std::vector<UnitOfWork> held;
    if (rt_.cpu_gate) held = rt_.cpu_gate->close();
    if (running.empty() && buffered.empty() && held.empty()) return;
    std::vector<UnitOfWork> units = std::move(buffered);
    for (auto& u : held) units.push_back(std::move(u));
    const size_t interrupted = running.size();
    for (auto& j : running) units.push_back({j.queue, j.payload});
    rt_.log.warn("Terminating {} busy worker threads", interrupted);
    redis::Connection conn(rt_.connection_options);
    const auto commands = rt_.fetcher.requeue_commands(units);
    for (int attempt = 0;; ++attempt) {
        try {
            conn.pipeline(commands);
            rt_.log.info("Pushed {} jobs back to Redis", units.size());
            break;
        } catch (const redis::Error& e) {
            if (attempt == 10) {
                for (const auto& u : units)
                    rt_.log.error("could not push back to queue:{} (Redis: {}): {}", u.queue,
                                  e.what(), u.payload);
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
        }
    }
    requeued_ = interrupted;
    // Sidekiq counts an interrupted job as processed and failed
    // (docs/data-model.md#interrupted-jobs).
    rt_.work.processed.fetch_add(static_cast<long long>(interrupted));
    rt_.work.failed.fetch_add(static_cast<long long>(interrupted));
}

bool Manager::stop(const std::function<Clock::time_point()>& deadline) {
    quiet();
    if (wait_all_until(Clock::time_point::max(), &deadline)) return true;
    requeue_running_jobs();
    rt_.lifecycle.hard_stop.request_stop();
    return wait_all_until(Clock::now() + std::chrono::seconds(3), nullptr);
}

}  // namespace kiqd
