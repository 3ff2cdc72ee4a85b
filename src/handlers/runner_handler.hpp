#pragma once
// Runner handlers: job classes run by a pool of long-lived worker processes
// (docs/runner-protocol.md), configured as
//
//   runners:
//     rails: {command: ["kiqd-ruby-runner", "--require", "./config/environment.rb"]}
//   handlers:
//     "*": {runner: rails}                    # every class without another handler
//     ResizeImage: {runner: rails, timeout: 30}
//
// The handler runs on the processor thread: RunnerPool::exchange takes a seat on a child (one
// of the jobs it runs at once), sends the payload exactly as it was in Redis, and waits for the
// answer.
//   done                        → success
//   fail                        → RunnerFailure: the runner's error class, message, backtrace and
//                                 retry_in (or kill/discard); once retries are exhausted the
//                                 runner is told (`exhausted`) to call
//                                 sidekiq_retries_exhausted/death handlers
//   fail with a decision        → the runner ran Sidekiq's JobRetry itself: kiqd writes what it
//                                 decided (retry at its time, dead, or nothing) and, for a retry
//                                 or dead, tells it `written` on the job's seat, which it holds
//                                 until the runner has run Sidekiq's later hooks (`done`)
//   death, EOF, malformed reply → "Kiqd::RunnerCrashed" for every job the child held; the child
//                                 is killed and replaced
//   runs past `timeout`         → "Kiqd::Timeout"; the child takes no new job, its other jobs get
//                                 5 s, then SIGTERM to its group (SIGKILL 5 s later); jobs still
//                                 on it then are requeued (RunnerRequeue), not failed
//   kiqd's hard shutdown        → SIGTERM (SIGKILL after 2 s); a `done` within that grace counts
//                                 as done, otherwise kiqd::Interrupted once the child is gone,
//                                 and the processor requeues the job
// RunnerPools is built on the main thread, started before the processors and stopped after
// them; the pools are thread-safe (runner_pool.hpp).
#include <spdlog/logger.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/worker_catalog.hpp"
#include "handlers/runner_pool.hpp"
#include "job/job_retry.hpp"
#include "kiqd/config.hpp"
#include "kiqd/handler_registry.hpp"
#include "kiqd/worker_selector.hpp"

namespace kiqd {

// A runner's `fail`: a JobError with the job's own retry delay and what to call when the
// retries are exhausted (the processor hands both to JobRetry through Failure).
class RunnerFailure : public JobError {
  public:
    RunnerFailure(std::string error_class, const std::string& message,
                  std::vector<std::string> backtrace, std::optional<long long> retry_in,
                  Failure::GiveUp give_up, std::function<void(const std::string&)> on_exhausted)
        : JobError(std::move(error_class), message, std::move(backtrace)),
          retry_in(retry_in),
          give_up(give_up),
          on_exhausted(std::move(on_exhausted)) {}
    std::optional<long long> retry_in;
    Failure::GiveUp give_up;
    std::function<void(const std::string& payload)> on_exhausted;
    // A runner that ran Sidekiq's own retry decision (Failure::decision), and what tells it the
    // outcome is written.
    Failure::Decision decision = Failure::Decision::none;
    double retry_at = 0;
    std::function<void()> after_write;
};

// Thrown by a runner handler whose job was cut short through no fault of its own: another job
// on the same process timed out, and the process was stopped before this one finished. The
// processor puts the job back at the front of its queue, as at shutdown; it is not a failure.
class RunnerRequeue : public Interrupted {};

// Every `runners:` pool of a config, by name.
class RunnerPools {
  public:
    RunnerPools() = default;
    explicit RunnerPools(const Config& config);
    ~RunnerPools();
    bool empty() const { return pools_.empty(); }
    std::shared_ptr<RunnerPool> find(const std::string& name) const;
    void start(spdlog::logger& log);  // boots every pool's children (main thread)
    // Quiet (TSTP) or, with `shutdown`, kiqd's shutdown began: tells the runners (any thread).
    void quiet(bool shutdown = false) const;
    void stop();  // after the processors have stopped
    std::vector<RunnerChildInfo> snapshot() const;
    // The application's own server settings, from the first pool whose runner has reported them
    // (nullopt while none has booted). Any thread.
    std::optional<runner::AppSettings> app_settings() const;
    // Waits for the first runner to boot (at most the longest `boot_timeout`), as Sidekiq boots
    // the app before it fetches: its capsules and job classes shape kiqd's own. nullopt when none
    // booted in time. Main thread, at start, before the Launcher is built.
    std::optional<runner::AppSettings> await_app_settings() const;
    // Set once the settings were taken at start; the heartbeat then leaves them. Any thread.
    void mark_app_settings_taken() { app_settings_taken_ = true; }
    bool app_settings_taken() const { return app_settings_taken_; }
    // check-config: boots one child of each pool once. Problems as "runners.NAME (line N): …".
    std::vector<std::string> boot_check() const;

  private:
    std::map<std::string, std::shared_ptr<RunnerPool>> pools_;
    std::atomic<bool> app_settings_taken_{false};
};

// Registers every `handlers: … runner:` entry ("*" as the registry's fallback).
void register_runner_handlers(const Config& config, HandlerRegistry& registry,
                              const RunnerPools& pools);

// Every `handlers:` entry whose key is a worker selector: each declared class (the catalog's)
// that has no handler of its own gets the first matching entry's runner. After the catalog is
// built (main thread, startup).
void register_runner_selector_handlers(const Config& config, const WorkerCatalog& catalog,
                                       HandlerRegistry& registry, const RunnerPools& pools);

// Whether `handler` was made for a runner: like an exec handler, its normal return means the
// job is done, even after the hard-shutdown stop signal.
bool is_runner_handler(const Handler& handler);

// The pools of the running daemon, for TTIN and /metrics; null when none. Set by
// RunnerPools::start, cleared by stop.
const RunnerPools* active_runner_pools();

// Prometheus series of every runner child of the running daemon (kiqd_runner_child_*, by runner
// and slot), appended to `out`; nothing without runners. The metrics thread.
void render_runner_metrics(std::string& out);

// "master" for a pool's master, else the slot number.
std::string runner_slot_label(const RunnerChildInfo& c);

// The runner children as the JSON array the heartbeat publishes in the process's hash
// (`kiqd_runners`, read by `kiqd processes`); "" without runners. Any thread.
std::string runner_children_json();

}  // namespace kiqd
