#pragma once
// Pause control, the processor side: what is paused right now (PauseState), where a paused
// class's jobs wait (ParkedJobs), and the server middleware that parks them (GitLab's
// pause_control, docs/data-model.md#pause-control-keys, plus the queue pause of Sidekiq Pro and
// asynq).
//
// A paused queue is left out of every fetch (QueueOrder's paused flags, set by the
// PauseController); a job popped from it in the instant before the pause was seen goes back to
// the front of its queue untouched. A paused worker class's jobs are fetched as usual and then
// parked: each job's exact payload is added to the class's ZSET, scored by an INCR counter, so
// the parked jobs keep the order in which they were fetched. A parked or put-back job counts as
// neither processed nor failed. The PauseController moves parked jobs back once the class is
// resumed (ParkedJobs::resume_batch).
//
// PauseState is written by the pause-control thread and read by every processor thread; the
// common case (nothing paused) costs processors one atomic load per job.
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>

#include "kiqd/clock.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/middleware_chain.hpp"
#include "kiqd/pause_strategy.hpp"
#include "kiqd/redis/script.hpp"

namespace kiqd {

struct PausedSet {
    std::unordered_set<std::string> workers;  // job classes whose jobs are parked
    std::unordered_set<std::string> queues;   // queues left out of fetches
    bool operator==(const PausedSet&) const = default;
};

class PauseState {
  public:
    bool anything_paused() const { return any_.load(std::memory_order_acquire); }
    std::shared_ptr<const PausedSet> current() const;
    // Replaces the set; returns true when it differs from the previous one.
    bool update(PausedSet next);

  private:
    mutable std::mutex mutex_;
    std::shared_ptr<const PausedSet> current_ = std::make_shared<PausedSet>();
    std::atomic<bool> any_{false};
};

// "Elastic::IndexWorker" → "elastic/index_worker", as ActiveSupport's String#underscore, which
// GitLab uses in the parked-jobs key names.
std::string pause_control_worker_name(std::string_view job_class);

// The parked jobs of every class, in Redis. Stateless apart from its scripts; shared by threads.
class ParkedJobs {
  public:
    ParkedJobs(const Keys& keys, Compat compat);
    // Parks one job (its payload byte for byte) after the class's other parked jobs, and
    // records the class and its strategy's descriptor in the parked-classes hash. One round
    // trip; parking the same payload twice leaves one entry. With reliable fetch,
    // `working_list` is the list holding the job: it leaves it in the same step.
    void park(redis::Connection& conn, const std::string& job_class, const std::string& payload,
              const std::string& descriptor, const std::string* working_list = nullptr) const;
    // Moves up to `batch` of the class's oldest parked jobs to the back of their queues (with a
    // fresh enqueued_at, as Sidekiq's poller does), in order, in one atomic script: a crash
    // loses or duplicates nothing. When the class has none left its keys are removed.
    struct Resumed {
        size_t moved = 0;
        long long left = 0;  // still parked after this batch
    };
    Resumed resume_batch(redis::Connection& conn, const std::string& job_class, size_t batch) const;

  private:
    const Keys& keys_;
    Compat compat_;
    redis::Script park_script_;
    redis::Script resume_script_;
};

class PauseControlMiddleware final : public ServerMiddleware {
  public:
    PauseControlMiddleware(const PauseState& state, const ParkedJobs& parked,
                           const PauseStrategies& strategies, const Keys& keys)
        : state_(state), parked_(parked), strategies_(strategies), keys_(keys) {}
    std::string_view name() const override { return "pause_control"; }
    void call(JobContext& ctx, const Next& next) const override;

  private:
    const PauseState& state_;
    const ParkedJobs& parked_;
    const PauseStrategies& strategies_;
    const Keys& keys_;
};

}  // namespace kiqd
