#include "server/manager.hpp"

#include <algorithm>

#include "fetch/cpu_gate.hpp"
#include "handlers/exec_handler.hpp"
#include "kiqd/deadline.hpp"
#include "server/connection_budget.hpp"
#include "server/logging.hpp"

namespace kiqd {
namespace {

// How long processors get to return after the stop signal: an exec command's SIGTERM → SIGKILL
// grace, plus a second for the kill, the reap and the outcome's write.
const auto kStopGrace = ExecLimits{}.shutdown_grace + std::chrono::seconds(1);

}  // namespace

Manager::Manager(Runtime& rt) : Manager(rt, {{&rt, 0, rt.work.slots()}}) {}

Manager::Manager(Runtime& rt, const std::vector<CapsuleThreads>& capsules) : rt_(rt) {
    for (const auto& cap : capsules) {
        fetchers_.push_back(&cap.rt->fetcher);
        for (size_t i = 0; i < cap.threads; ++i)
            processors_.push_back(std::make_unique<Processor>(
                *cap.rt, cap.first_slot + i,
                [this] {
                    {
                        std::lock_guard lock(mutex_);
                        --alive_;
                    }
                    cv_.notify_all();
                },
                i));
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

bool Manager::write_at_shutdown(const std::vector<redis::Command>& commands) {
    redis::Connection conn(named_connection(rt_.connection_options, rt_.identity, "shutdown"));
    for (int attempt = 0;; ++attempt) {
        try {
            conn.pipeline(commands);
            return true;
        } catch (const redis::Error& e) {
            if (attempt == 10) {
                rt_.log.error("could not push jobs back to Redis: {}", e.what());
                return false;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
        }
    }
}

size_t Manager::requeue_unstarted_jobs() {
    // Jobs still in the fetch buffer and cpu-bound jobs still waiting for a slot never started:
    // they go back at once, in fetch order, and are not counted as interrupted.
    // Every capsule fetches with basic fetch when there are several (capsules_config.hpp), so
    // the first fetcher's requeue (RPUSH to each job's queue) fits every capsule's jobs.
    std::vector<UnitOfWork> units;
    for (const Fetcher* f : fetchers_) {
        auto taken = f->take_buffered();
        std::reverse(taken.begin(), taken.end());
        for (auto& u : taken) units.push_back(std::move(u));
    }
    if (rt_.cpu_gate)
        for (auto& u : rt_.cpu_gate->close()) units.push_back(std::move(u));
    if (units.empty()) return 0;
    if (!write_at_shutdown(rt_.fetcher.requeue_commands(units))) {
        for (const auto& u : units)
            rt_.log.error("could not push back to queue:{}: {}", u.queue, u.payload);
        return 0;
    }
    return units.size();
}

bool Manager::stop(const std::function<Clock::time_point()>& deadline) {
    quiet();
    if (wait_all_until(Clock::time_point::max(), &deadline)) return true;
    rt_.log.warn("Terminating {} busy worker threads", rt_.work.busy());
    const size_t unstarted = requeue_unstarted_jobs();
    // Stop what runs before anything goes back: each processor requeues its own job once its
    // handler has returned (processor.cpp), so no other process can start a job still running.
    rt_.lifecycle.hard_stop.request_stop();
    const bool ended = wait_all_until(deadline_in(kStopGrace), nullptr);
    if (!ended) {
        stuck_ = rt_.work.abandon_all();
        // Sidekiq counts an interrupted job as processed and failed
        // (docs/data-model.md#interrupted-jobs); counted now, while the heartbeat still flushes.
        rt_.work.processed.fetch_add(static_cast<long long>(stuck_.size()));
        rt_.work.failed.fetch_add(static_cast<long long>(stuck_.size()));
    }
    rt_.log.info("Pushed {} jobs back to Redis", unstarted + rt_.work.requeued.load());
    return ended;
}

void Manager::requeue_stuck_jobs() {
    // A command outliving the process would run on while its job starts elsewhere.
    kill_exec_children();
    if (stuck_.empty()) return;
    std::vector<UnitOfWork> back;
    for (const auto& j : stuck_) {
        if (rt_.fetcher.working_list(j.queue)) {
            rt_.log.warn(
                "class={} jid={} still running in a handler that ignores the stop signal: it "
                "stays in the working list, and orphan recovery returns it to queue:{} once "
                "this process's liveness key has expired",
                j.display_class, j.jid, j.queue);
            continue;
        }
        rt_.log.warn(
            "class={} jid={} still running in a handler that ignores the stop signal: pushed "
            "back to queue:{} as the process exits",
            j.display_class, j.jid, j.queue);
        back.push_back({j.queue, j.payload});
    }
    if (back.empty()) return;
    drain_log(rt_.log);  // the lines above are out before the jobs are
    if (!write_at_shutdown(rt_.fetcher.requeue_commands(back)))
        for (const auto& u : back)
            rt_.log.error("could not push back to queue:{}: {}", u.queue, u.payload);
}

}  // namespace kiqd
