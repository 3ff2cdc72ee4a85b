#pragma once
// Processor: one OS thread with its own Redis connection. Loop: fetch (BRPOP, 2 s) → parse →
// middleware chain → handler → record the outcome (retry/dead on failure), until quiet. A job
// fetched after quiet is pushed back at once. Unrunnable payloads go to the dead set with a
// reason. Redis errors never end the thread: it backs off and reconnects, and writes of an
// outcome are retried until they land (or the process is hard-stopped, when the payload is
// logged). At a hard shutdown a job its handler gave up goes back to its queue from here, once
// the handler has returned (manager.hpp). Owned by the Manager; only this thread touches its
// connection and RNG.
#include <atomic>
#include <functional>
#include <random>
#include <thread>

#include "server/runtime.hpp"

namespace kiqd {

class Processor {
  public:
    // `slot`: this thread's WorkState slot, unique in the process; `fetch_slot`: its number
    // among the threads of its capsule's fetcher (rt.fetcher), the same as `slot` when the
    // process has one capsule.
    Processor(Runtime& rt, size_t slot, std::function<void()> on_exit,
              size_t fetch_slot = static_cast<size_t>(-1));
    ~Processor();
    void start();
    void join();
    void detach();
    bool running() const { return running_.load(); }

    // Runs one fetched unit to its recorded outcome. Public so tests can drive it directly.
    void process(redis::Connection& conn, UnitOfWork unit);

  private:
    // Decides, once the job is parsed, whether it runs now (true) or was held/requeued (false).
    using Admission = std::function<bool(UnitOfWork& unit, const Job& job)>;
    void run_unit(redis::Connection& conn, UnitOfWork unit, const Admission& admit);
    void run() noexcept;
    Failure failure_from_current_exception(const Job& job) const;
    // False when the write was refused or given up (its payload is then in the log).
    // Replies past the first `checked` commands (after-job commands) are not checked.
    bool write_until_done(redis::Connection& conn, const std::vector<redis::Command>& commands,
                          const std::string& what, const std::string& payload,
                          size_t checked = static_cast<size_t>(-1));
    // Sends the pending after-job commands now (replies unchecked; kept if the write fails).
    void send_pending(redis::Connection& conn);
    // write_until_done of `commands` followed by the pending after-job commands.
    bool write_with_pending(redis::Connection& conn, std::vector<redis::Command> commands,
                            const std::string& what, const std::string& payload);
    // A job its handler gave up at the hard-shutdown stop signal (at_shutdown), or whose runner
    // process was stopped when another job on it timed out: back to the front of its queue, now
    // that nothing runs it any more.
    void push_back_interrupted(redis::Connection& conn, const UnitOfWork& unit, const Job& job,
                               bool at_shutdown);
    // How a fetched job ended, for record_outcome.
    enum class Outcome {
        unrunnable,  // the payload cannot be run: a dead-set entry
        done,        // it ran (or a middleware parked it): nothing but the acknowledgement
        failed,      // it raised: a retry, a dead-set entry, or nothing (retry: false)
    };
    // Records how a job ended: `writes` (the outcome's own commands) with the job's
    // acknowledgement folded in (reliable fetch: its LREM from the working list), then the
    // pending after-job commands, in one pipeline retried until it lands. `payload` is logged
    // if it cannot be written. A job that is done writes nothing when a batched fetch defers its
    // acknowledgement, or when there is nothing to acknowledge (basic fetch): the pending
    // commands then ride along with the next fetch. `acknowledge` false: a middleware already
    // took the job out of the working list, so no acknowledgement is written.
    void record_outcome(redis::Connection& conn, const UnitOfWork& unit, Outcome outcome,
                        std::vector<redis::Command> writes, const std::string& payload,
                        bool acknowledge = true);

    Runtime& rt_;
    size_t slot_;
    size_t fetch_slot_;
    std::function<void()> on_exit_;
    std::mt19937_64 rng_;
    std::vector<redis::Command> pending_;       // JobContext::after_job of the last job(s)
    std::vector<redis::Command> after_refill_;  // JobContext::after_refill of the job running
    std::thread thread_;
    std::atomic<bool> running_{false};
};

}  // namespace kiqd
