#pragma once
// Launcher: wires one kiqd process together and runs it until it is stopped. It owns the
// Manager (processor threads), the Scheduler thread, with `fetch: reliable` the OrphanRecovery
// thread, the PauseController thread, through its ChainAssembly the LockKeeper and (with a
// concurrency_limit) SlotKeeper threads, with `metrics:` the MetricsServer thread,
// the worker catalog, job metrics and cpu gate shared by the processors, and, on the calling
// (main) thread, an Asio
// io_context that handles OS signals and the heartbeat timer:
//   SIGTERM/SIGINT or a remote TERM → graceful stop (a second one: stop now, still requeueing);
//   SIGTSTP or a remote TSTP → quiet; SIGTTIN or a remote TTIN → log every running job;
//   SIGHUP → reopen the log file.
// Sidekiq 7's capsules each get their own queue order, fetcher and processor threads (held by
// the one Manager); middleware, handlers, runners, limits and the rest above are shared.
// Under systemd (Type=notify) the io thread also sends READY=1 after the first heartbeat that
// reached Redis, STATUS= at every beat, STOPPING=1 at the first stop request and WATCHDOG=1
// every WATCHDOG_USEC/2, so a stuck io thread gets the process restarted.
// The stop itself runs on a separate thread so that signals and heartbeats keep being served
// while it waits for running jobs.
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "config/worker_catalog.hpp"
#include "cron/cron_poller.hpp"
#include "fetch/cpu_gate.hpp"
#include "fetch/limit_fetcher.hpp"
#include "kiqd/client.hpp"
#include "middleware/job_metrics.hpp"
#include "middleware/pause/pause_controller.hpp"
#include "server/chain_assembly.hpp"
#include "server/gitlab_list_recovery.hpp"
#include "server/heartbeat.hpp"
#include "server/manager.hpp"
#include "server/metrics_server.hpp"
#include "server/orphan_recovery.hpp"
#include "server/process_identity.hpp"
#include "server/scheduler.hpp"
#include "server/systemd_notify.hpp"

namespace kiqd {

class Launcher {
  public:
    // `notifier` was taken from the environment at the start of kiqd::run, before anything
    // (exec handlers) copied the environment (see systemd_notify.hpp). `pause_strategies` are
    // the classes' pause strategies, resolved against the registry once plugins were loaded.
    Launcher(const Config& config, const HandlerRegistry& handlers, const MiddlewareChain& chain,
             spdlog::logger& log, SystemdNotifier notifier = {},
             PauseStrategies pause_strategies = {});
    ~Launcher();
    int run();  // blocks until the process has stopped; returns the exit code
    const std::string& identity() const { return me_.identity; }

  private:
    // A capsule besides the default one: its queue order, its fetcher, and the Runtime its
    // processors use (the process's, with this fetcher). Built before the Manager.
    struct CapsuleRun {
        const CapsuleConfig& config;
        QueueOrder order;
        std::unique_ptr<Fetcher> fetcher;
        std::unique_ptr<Runtime> rt;
        size_t first_slot;
    };
    std::vector<std::unique_ptr<CapsuleRun>> make_capsules();
    std::vector<Manager::CapsuleThreads> capsule_threads();
    void handle_signal(const std::string& name);
    void quiet();
    void begin_stop();
    void log_busy_jobs();
    void schedule_beat(std::chrono::steady_clock::duration delay);
    void schedule_watchdog();
    void notify_status();  // io thread: READY=1 once, then STATUS=

    const Config& config_;
    spdlog::logger& log_;
    SystemdNotifier notifier_;
    bool ready_sent_ = false;            // io thread only
    bool app_settings_adopted_ = false;  // io thread only: a runner's app settings were taken
    ProcessIdentity me_;
    Keys keys_;
    QueueOrder order_;
    std::unique_ptr<Fetcher> fetcher_;
    const ReliableFetcher* reliable_ = nullptr;  // fetcher_, when `fetch: reliable`
    DeadSet dead_;
    JobRetry retry_;
    WorkState work_;
    Lifecycle lifecycle_;
    RedisHealth health_;
    // kiqd's own middlewares, then the configured chain (the order: chain_assembly.hpp).
    MiddlewareChain chain_;
    PauseStrategies pause_strategies_;
    PauseState pause_state_;
    ParkedJobs parked_jobs_;
    Client client_;          // handlers' follow-up jobs (JobContext::enqueue)
    WorkerCatalog catalog_;  // worker metadata and routed queues
    JobMetrics job_metrics_;
    ExecutionMetrics execution_metrics_;  // Sidekiq 7/8's Metrics page
    std::unique_ptr<CpuGate> cpu_gate_;   // when some declared class is cpu-bound
    Runtime rt_;
    // Puts kiqd's own middlewares into chain_; owns the LockKeeper and SlotKeeper.
    ChainAssembly chain_assembly_;
    std::vector<std::unique_ptr<CapsuleRun>> capsules_;  // Sidekiq 7's `capsules:`, file order
    Manager manager_;
    Scheduler scheduler_;
    CronPoller cron_poller_;  // sidekiq-cron's jobs and the YAML's schedules
    Heartbeat heartbeat_;
    std::unique_ptr<OrphanRecovery> recovery_;          // with `fetch: reliable` only
    std::unique_ptr<LimitFetchMonitor> limit_monitor_;  // with sidekiq-limit_fetch's limits only
    std::unique_ptr<GitlabListRecovery> gitlab_lists_;  // when the app sets up the GitLab fetcher
    PauseController pause_controller_;
    std::unique_ptr<MetricsServer> metrics_;  // with `metrics: {listen: ...}` only

    boost::asio::io_context io_;
    boost::asio::signal_set signals_;
    boost::asio::steady_timer beat_timer_;
    boost::asio::steady_timer watchdog_timer_;
    std::thread stop_thread_;
    std::atomic<bool> stopping_{false};
    std::atomic<bool> all_threads_ended_{true};
    // Steady-clock deadline of the running stop, in ns since the clock's epoch.
    std::atomic<std::chrono::steady_clock::rep> deadline_ns_{0};
};

}  // namespace kiqd
