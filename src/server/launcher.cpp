#include "server/launcher.hpp"

#include <malloc.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <csignal>

#include "common/log_fields.hpp"
#include "fetch/fair_drain.hpp"
#include "fetch/fair_fetch.hpp"
#include "handlers/runner_handler.hpp"
#include "kiqd/deadline.hpp"
#include "kiqd/kiqd.hpp"
#include "server/app_settings.hpp"
#include "server/connection_budget.hpp"
#include "server/logging.hpp"

namespace kiqd {
namespace {

// The fetcher of one capsule with `concurrency` threads; `fair`: the fair queues' fetch (the
// default capsule only, capsules_config.hpp).
std::unique_ptr<Fetcher> make_fetcher(const Config& config, const Keys& keys,
                                      const QueueOrder& order, const std::string& identity,
                                      int concurrency, bool fair_queues) {
    // A thread refilling the fetch buffer runs no job meanwhile: up to half of the threads may,
    // at most 4, and the measured pace asks for more than one only when the round trip is slow
    // (fetch_buffer.hpp). +1 ms per round trip, c10: 29k jobs/s with 1, 97k with 8; c25: 4 gave
    // 102k (8: 107k) with 1.3 MB less peak RSS, and on loopback 129k (8: 123k).
    const auto max_refills = static_cast<size_t>(std::clamp(concurrency / 2, 1, 4));
    auto fair = !fair_queues || config.fair_fetch.queues.empty()
                    ? nullptr
                    : std::make_unique<FairFetch>(keys, order, config.fair_fetch);
    // sidekiq-limit_fetch's limits: basic fetch, one job at a time (config checked that).
    if (config.limit_fetch.enabled && config.fetch == FetchMode::basic)
        return std::make_unique<LimitFetcher>(keys, order, identity);
    if (config.fetch == FetchMode::reliable)
        return std::make_unique<ReliableFetcher>(
            keys, order, identity, static_cast<size_t>(config.reliable_fetch.batch_size),
            max_refills, std::move(fair), static_cast<size_t>(concurrency));
    return std::make_unique<BasicFetcher>(keys, order, static_cast<size_t>(config.prefetch),
                                          max_refills, std::move(fair),
                                          static_cast<size_t>(concurrency));
}

// `base` with another capsule's fetcher: everything else is shared.
std::unique_ptr<Runtime> runtime_with_fetcher(const Runtime& base, const Fetcher& fetcher) {
    return std::unique_ptr<Runtime>(new Runtime{
        base.config, base.keys, base.identity, base.log, base.connection_options, fetcher,
        base.handlers, base.chain, base.dead, base.retry, base.work, base.lifecycle, base.health,
        base.limits, base.client, base.cpu_gate, base.execution_metrics});
}

std::vector<std::string> fair_queue_names(const Config& config) {
    std::vector<std::string> out;
    for (const auto& q : config.fair_fetch.queues) out.push_back(q.queue);
    return out;
}

// A queue this process serves plainly but that still has fair-fetch tenant lists (fair_fetch
// was turned off): its jobs go back into the plain queue, in order, before the first fetch.
// Redis trouble here only delays that to the next start (`kiqd fair-fetch drain` does it too).
void drain_unfair_queues(const Config& config, const Keys& keys, const QueueOrder& order,
                         const redis::ConnectionOptions& options, spdlog::logger& log) {
    try {
        std::vector<std::string> plain;
        for (const auto& q : order.names())
            if (!config.fair_fetch.find(q)) plain.push_back(q);
        if (plain.empty()) return;
        redis::Connection conn(options);
        conn.connect();
        for (const auto& q : with_fair_state(conn, keys, plain)) {
            const long long moved = drain_fair_queue(conn, keys, q);
            log.warn(
                "fair fetch: queue {} is not fair in this config: moved its {} jobs from "
                "tenant lists back into queue:{}, in order",
                q, moved, q);
        }
    } catch (const std::exception& e) {
        // Debug, not warn: Redis trouble at start (down, a wrong password, TLS) is reported once,
        // clearly, by the connection that retries it; a second line here would repeat it.
        log.debug("fair fetch: could not check for tenant lists of plain queues: {}", e.what());
    }
}

}  // namespace

Launcher::Launcher(const Config& config, const HandlerRegistry& handlers,
                   const MiddlewareChain& chain, spdlog::logger& log, SystemdNotifier notifier,
                   PauseStrategies pause_strategies)
    : config_(config),
      log_(log),
      notifier_(std::move(notifier)),
      me_(ProcessIdentity::create()),
      keys_(config.redis.key_prefix),
      order_(config.queues),
      fetcher_(make_fetcher(config, keys_, order_, me_.identity, config.concurrency, true)),
      reliable_(dynamic_cast<const ReliableFetcher*>(fetcher_.get())),
      dead_(keys_, config.dead_max_jobs, config.dead_timeout_seconds, config.compat),
      retry_(config.compat, config.max_retries, keys_, dead_),
      work_(static_cast<size_t>(total_concurrency(config))),
      health_(log),
      chain_(chain),
      pause_strategies_(std::move(pause_strategies)),
      parked_jobs_(keys_, config.compat),
      client_(make_process_client(config)),
      catalog_(config, handlers),
      cpu_gate_(catalog_.any_cpu_bound()
                    ? std::make_unique<CpuGate>(catalog_,
                                                static_cast<size_t>(config.cpu_bound_concurrency),
                                                static_cast<size_t>(total_concurrency(config)))
                    : nullptr),
      rt_{config,
          keys_,
          me_.identity,
          log,
          redis::ConnectionOptions{config.redis.endpoint, config.redis.connect_timeout,
                                   std::chrono::milliseconds(5000), "", config.redis.sentinel,
                                   config.redis.tls_context},
          *fetcher_,
          handlers,
          chain_,
          dead_,
          retry_,
          work_,
          lifecycle_,
          health_,
          JobLimits{config.max_payload_bytes, 256},
          &client_,
          cpu_gate_.get(),
          &execution_metrics_},
      // Processors start in run(), so the chain can still gain kiqd's own middlewares here.
      chain_assembly_(rt_,
                      ChainAssembly::SharedState{pause_state_, parked_jobs_, pause_strategies_,
                                                 catalog_, job_metrics_},
                      chain_),
      capsules_(make_capsules()),
      manager_(rt_, capsule_threads()),
      scheduler_(rt_),
      cron_poller_(rt_, client_),
      heartbeat_(rt_, me_, me_.info_json(config, order_)),
      pause_controller_(rt_, pause_state_, order_, parked_jobs_, pause_strategies_),
      signals_(io_, SIGINT, SIGTERM),
      beat_timer_(io_),
      watchdog_timer_(io_) {
    signals_.add(SIGTSTP);
    signals_.add(SIGTTIN);
    signals_.add(SIGHUP);
    if (!capsules_.empty()) {
        std::vector<Heartbeat::CapsuleSlots> slots{
            {"default", 0, static_cast<size_t>(config.concurrency)}};
        for (const auto& c : capsules_) {
            slots.push_back(
                {c->config.name, c->first_slot, static_cast<size_t>(c->config.concurrency)});
            pause_controller_.also_pause(c->order);
        }
        heartbeat_.set_capsules(std::move(slots));
    }
    // The line that ends a window of refused writes counts the jobs that waited in this
    // process's queues meanwhile: one round trip, once per window.
    health_.set_waiting_jobs([this]() -> std::optional<long long> {
        std::vector<redis::Command> lengths;
        for (const auto& q : served_queue_names(config_, order_))
            lengths.push_back({"LLEN", keys_.queue(q)});
        if (lengths.empty()) return 0;
        redis::Connection conn(
            named_connection(rt_.connection_options, me_.identity, "refusal-report"));
        long long waiting = 0;
        for (const auto& r : conn.pipeline(lengths)) waiting += r.integer();
        return waiting;
    });
    if (reliable_) recovery_ = std::make_unique<OrphanRecovery>(rt_, *reliable_);
    if (const RunnerPools* pools = active_runner_pools())
        if (auto app = pools->app_settings(); app && uses_gitlab_fetcher(*app))
            gitlab_lists_ = std::make_unique<GitlabListRecovery>(
                keys_, named_connection(rt_.connection_options, me_.identity, "gitlab-lists"),
                config.reliable_fetch.orphan_check_interval, log);
    if (config.limit_fetch.enabled)
        limit_monitor_ = std::make_unique<LimitFetchMonitor>(
            config, keys_, order_.names(), me_.identity,
            named_connection(rt_.connection_options, me_.identity, "limit-fetch"), log);
    // Batched reliable fetch acquires unique locks and concurrency slots for a whole refill in
    // one script call (refill_acquirer.hpp); before any processor starts.
    if (auto* reliable = dynamic_cast<ReliableFetcher*>(fetcher_.get()))
        reliable->set_acquirer(chain_assembly_.refill_acquirer());
    // Follow-up jobs are routed with everything the catalog knows, C++ declarations included.
    if (!config.routing_rules.empty())
        client_.set_router(
            [this](const std::string& job_class) { return catalog_.routed_queue(job_class); });
    if (!config.metrics.listen.empty()) {
        metrics_ = std::make_unique<MetricsServer>(
            config.metrics,
            MetricsServer::Sources{
                job_metrics_, work_, keys_, served_queue_names(config, order_),
                named_connection(rt_.connection_options, me_.identity, "metrics"),
                [this] { return manager_.alive(); },
                [this] { return lifecycle_.is_quiet() || stopping_.load(); },
                [this] {
                    return cpu_gate_ ? cpu_gate_->counts() : std::pair<size_t, size_t>{0, 0};
                },
                fair_queue_names(config)},
            log);
    }
}

std::vector<std::unique_ptr<Launcher::CapsuleRun>> Launcher::make_capsules() {
    std::vector<std::unique_ptr<CapsuleRun>> out;
    auto first = static_cast<size_t>(config_.concurrency);  // the default capsule's come first
    for (const auto& cap : config_.capsules) {
        auto run = std::unique_ptr<CapsuleRun>(
            new CapsuleRun{cap, QueueOrder(cap.queues), nullptr, nullptr, first});
        run->fetcher =
            make_fetcher(config_, keys_, run->order, me_.identity, cap.concurrency, false);
        run->rt = runtime_with_fetcher(rt_, *run->fetcher);
        first += static_cast<size_t>(cap.concurrency);
        out.push_back(std::move(run));
    }
    return out;
}

std::vector<Manager::CapsuleThreads> Launcher::capsule_threads() {
    std::vector<Manager::CapsuleThreads> out{{&rt_, 0, static_cast<size_t>(config_.concurrency)}};
    for (const auto& c : capsules_)
        out.push_back({c->rt.get(), c->first_slot, static_cast<size_t>(c->config.concurrency)});
    return out;
}

Launcher::~Launcher() {
    if (stop_thread_.joinable()) stop_thread_.join();
}

void Launcher::schedule_beat(std::chrono::steady_clock::duration delay) {
    beat_timer_.expires_after(delay);
    beat_timer_.async_wait([this](const boost::system::error_code& ec) {
        if (ec) return;
        if (auto signal = heartbeat_.beat()) {
            log_.info("received remote signal {}", *signal);
            handle_signal(*signal);
        }
        // The app's own max_retries and dead set limits, once its runner has booted (when it
        // was not ready by the start, which took them then).
        if (!app_settings_adopted_)
            if (const RunnerPools* pools = active_runner_pools();
                pools && !pools->app_settings_taken())
                if (auto app = pools->app_settings()) {
                    adopt_app_settings(*app, config_, retry_, dead_, log_);
                    app_settings_adopted_ = true;
                }
        notify_status();
        schedule_beat(heartbeat_.period());
    });
}

void Launcher::notify_status() {
    if (!notifier_.enabled()) return;
    // The beat just made reached Redis unless the health tracker says Redis is down.
    const bool redis_up = !health_.down();
    if (!ready_sent_ && redis_up && !stopping_) {
        ready_sent_ = true;
        notifier_.notify("READY=1");
    }
    std::string status = fmt::format("{} of {} busy", work_.busy(), work_.slots());
    if (stopping_)
        status += ", stopping";
    else if (lifecycle_.is_quiet())
        status += ", quiet";
    if (!redis_up) status += ready_sent_ ? ", Redis unreachable" : ", waiting for Redis";
    notifier_.notify("STATUS=" + status);
}

void Launcher::schedule_watchdog() {
    const auto timeout = notifier_.watchdog();
    if (!timeout) return;
    notifier_.notify("WATCHDOG=1");
    // Half the timeout, as sd_watchdog_enabled(3) recommends: one late ping is not fatal.
    watchdog_timer_.expires_after(*timeout / 2);
    watchdog_timer_.async_wait([this](const boost::system::error_code& ec) {
        if (!ec) schedule_watchdog();
    });
}

void Launcher::handle_signal(const std::string& name) {
    if (name == "TSTP")
        quiet();
    else if (name == "TTIN")
        log_busy_jobs();
    else if (name == "TERM" || name == "INT")
        begin_stop();
    else
        log_.warn("ignoring unknown signal {}", name);
}

void Launcher::quiet() {
    if (lifecycle_.is_quiet()) return;
    log_.info("Terminating quiet threads: no new jobs will be fetched");
    manager_.quiet();
    heartbeat_.publish_quiet();  // quiet() always runs on the io thread, which owns the heartbeat
    // Runner processes hear it too: their long jobs (Sidekiq's iterable jobs) may stop early.
    if (const RunnerPools* pools = active_runner_pools()) pools->quiet();
}

void Launcher::log_busy_jobs() {
    const auto running = work_.snapshot();
    log_.warn("TTIN: {} of {} threads busy", running.size(), work_.slots());
    const auto now = std::chrono::steady_clock::now();
    for (const auto& e : running) {
        const double seconds = std::chrono::duration<double>(now - e.job.started).count();
        log_.warn(LogLine()
                      .field("tid", *e.tid)
                      .field("class", e.job.display_class)
                      .field("jid", e.job.jid)
                      .field("queue", e.job.queue)
                      .json_number("running_s", seconds)
                      .message("running", fmt::format("running for {:.3f} s", seconds)));
    }
    if (const RunnerPools* pools = active_runner_pools()) {
        for (const auto& c : pools->snapshot())
            log_.warn("runner={} slot={} pid={} state={} jobs={} in_flight={}/{} rss={:.1f} MB{}",
                      c.runner, runner_slot_label(c), c.pid, c.state, c.jobs, c.in_flight,
                      c.capacity, static_cast<double>(c.rss_bytes) / (1024 * 1024),
                      c.jid.empty() ? "" : fmt::format(" class={} jid={}", c.job_class, c.jid));
    }
}

void Launcher::begin_stop() {
    using Clock = std::chrono::steady_clock;
    if (stopping_.exchange(true)) {
        log_.warn("second stop request: stopping now, running jobs go back to their queues");
        deadline_ns_ = Clock::now().time_since_epoch().count();
        return;
    }
    notifier_.notify("STOPPING=1\nSTATUS=stopping: waiting for running jobs");
    if (const RunnerPools* pools = active_runner_pools()) pools->quiet(true);
    log_.info("Shutting down: waiting up to {:.1f} s for running jobs",
              std::chrono::duration<double>(config_.timeout).count());
    deadline_ns_ = saturating_deadline(Clock::now(), config_.timeout).time_since_epoch().count();
    stop_thread_ = std::thread([this] {
        const bool ended = manager_.stop(
            [this] { return Clock::time_point(Clock::duration(deadline_ns_.load())); });
        all_threads_ended_ = ended;
        scheduler_.stop();
        cron_poller_.stop();
        if (recovery_) recovery_->stop(ended);
        if (limit_monitor_) limit_monitor_->stop();  // after the jobs gave their places back
        if (gitlab_lists_) gitlab_lists_->stop();
        chain_assembly_.lock_keeper().stop();
        pause_controller_.stop();
        if (auto* slots = chain_assembly_.slot_keeper()) slots->stop();
        if (metrics_) metrics_->stop();
        boost::asio::post(io_, [this] {
            beat_timer_.cancel();
            watchdog_timer_.cancel();
            signals_.cancel();
            heartbeat_.clear();
            log_.info("Bye!");
            io_.stop();
        });
    });
}

int Launcher::run() {
    // A large payload's copies (each up to max_payload_bytes) are mapped and unmapped on their
    // own, never kept in glibc's heaps: its default threshold grows to the largest block freed,
    // after which a 16 MiB payload's buffers stayed resident (and fragmented) after its job
    // (docs/hardening-bounds.md#payload-memory). Small allocations are unaffected.
    mallopt(M_MMAP_THRESHOLD, 1024 * 1024);

    log_.info("kiqd {} starting: identity={} concurrency={} queues={} ({}) fetch={} redis={}{}",
              KIQD_VERSION, me_.identity, config_.concurrency, fmt::join(order_.names(), ","),
              order_.strict() ? "strict" : "weighted", reliable_ ? "reliable" : "basic",
              rt_.connection_options.describe(), config_.redis.endpoint.tls ? " (TLS)" : "");
    for (const auto& c : capsules_)
        log_.info("capsule {}: concurrency={} queues={} ({})", c->config.name,
                  c->config.concurrency, fmt::join(c->order.names(), ","),
                  c->order.strict() ? "strict" : "weighted");
    if (config_.redis.tls_context && !config_.redis.tls.verify_peer)
        log_.warn(
            "redis.tls.verify is none: the Redis server's certificate and name are not checked, "
            "so anyone on the network path can pose as Redis");
    std::function<void(const boost::system::error_code&, int)> on_signal =
        [&](const boost::system::error_code& ec, int signo) {
            if (ec) return;
            switch (signo) {
                case SIGTSTP:
                    handle_signal("TSTP");
                    break;
                case SIGTTIN:
                    handle_signal("TTIN");
                    break;
                case SIGHUP:
                    reopen_log_files();
                    log_.info("SIGHUP: reopened the log file");
                    break;
                default:
                    handle_signal("TERM");
                    break;
            }
            signals_.async_wait(on_signal);
        };
    signals_.async_wait(on_signal);
    if (metrics_) {
        try {
            metrics_->start();
        } catch (const std::exception& e) {
            log_.critical("{}", e.what());
            log_.flush();
            return kExitConfig;
        }
    }
    if (cpu_gate_)
        log_.info("cpu-bound jobs: at most {} at once (cpu_bound_concurrency)", cpu_gate_->limit());
    if (recovery_) recovery_->start();  // processors fetch once it has registered this process
    if (limit_monitor_) limit_monitor_->start();  // the config's limits before the first fetch
    if (gitlab_lists_) gitlab_lists_->start();
    chain_assembly_.lock_keeper().start();
    drain_unfair_queues(config_, keys_, order_, rt_.connection_options, log_);
    pause_controller_.refresh_before_start();
    pause_controller_.start();
    if (auto* slots = chain_assembly_.slot_keeper()) slots->start();
    manager_.start();
    scheduler_.start();
    cron_poller_.start();
    schedule_beat(std::chrono::steady_clock::duration::zero());  // first beat at once
    schedule_watchdog();
    io_.run();
    if (stop_thread_.joinable()) stop_thread_.join();
    log_.flush();
    if (!all_threads_ended_) {
        // Handlers ignore the stop signal. Their jobs go back only now, as the last step before
        // the exit ends their threads (manager.hpp).
        manager_.requeue_stuck_jobs();
        log_.warn("exiting while some handlers ignore the stop signal");
        drain_log(log_);
        std::_Exit(0);
    }
    return 0;
}

}  // namespace kiqd
