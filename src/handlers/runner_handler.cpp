#include "handlers/runner_handler.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <atomic>
#include <cerrno>
#include <nlohmann/json.hpp>

#include "common/outcome_counters.hpp"
#include "fetch/queue_rests.hpp"
#include "handlers/child_environment.hpp"
#include "handlers/child_spawn.hpp"
#include "handlers/runner_protocol.hpp"
#include "kiqd/deadline.hpp"

extern char** environ;

namespace kiqd {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const milliseconds kExhaustedTimeout{30000};

std::atomic<const RunnerPools*> g_active{nullptr};

class RunnerJobHandler {
  public:
    RunnerJobHandler(std::shared_ptr<RunnerPool> pool, std::optional<milliseconds> timeout)
        : pool_(std::move(pool)), timeout_(timeout) {}

    void operator()(const Job& job, JobContext& ctx) const;

  private:
    void exhausted(spdlog::logger& log, const StopSignal& stop, const std::string& payload,
                   const std::string& error_class, const std::string& message) const;

    std::shared_ptr<RunnerPool> pool_;
    std::optional<milliseconds> timeout_;
};

void RunnerJobHandler::operator()(const Job& job, JobContext& ctx) const {
    const auto out =
        pool_->exchange(ctx.stop, {"job", job.raw, job.display_class(), job.jid}, timeout_);
    const std::string& name = pool_->spec().name;
    const auto where = [&] {
        return std::vector<std::string>{
            fmt::format("runner {}: {}", name, fmt::join(pool_->spec().argv, " "))};
    };
    switch (out.end) {
        case RunnerEnd::answered:
            break;
        case RunnerEnd::not_started:
            throw Interrupted();  // the job never reached a runner
        case RunnerEnd::crashed:
            throw JobError(
                "Kiqd::RunnerCrashed",
                fmt::format("runner {} pid {} {} while running the job ({}){}", name, out.pid,
                            out.status ? describe_wait_status(*out.status) : "did not exit",
                            out.problem, out.stderr_tail),
                where());
        case RunnerEnd::timed_out:
            increment(outcome_counters().runner_timeouts);
            throw JobError("Kiqd::Timeout",
                           fmt::format("runner {} pid {} did not finish the job within {:g} s "
                                       "(sent SIGTERM)",
                                       name, out.pid, timeout_->count() / 1000.0),
                           where());
        case RunnerEnd::stopped:
            ctx.log.info("class={} jid={} runner={} pid {} stopped by shutdown",
                         job.display_class(), job.jid, name, out.pid);
            throw Interrupted();
        case RunnerEnd::requeue:
            ctx.log.info(
                "class={} jid={} runner={} pid {} was stopped: another job on it timed "
                "out",
                job.display_class(), job.jid, name, out.pid);
            throw RunnerRequeue();
    }
    const auto& reply = *out.reply;
    if (reply.throttled) {
        // The app's throttling handed the job back itself: it ran neither to success nor to
        // failure (the processor counts neither), and it is acknowledged here like a parked job.
        ctx.handler_ran = false;
        increment(outcome_counters().throttled);
        if (reply.rest_seconds > 0)
            queue_rests().rest(job.queue, std::chrono::duration_cast<QueueRests::Clock::duration>(
                                              std::chrono::duration<double>(reply.rest_seconds)));
        ctx.log.debug("class={} jid={} runner={} throttled by the app{}", job.display_class(),
                      job.jid, name,
                      reply.rest_seconds > 0
                          ? fmt::format(": queue {} rests {:g} s", job.queue, reply.rest_seconds)
                          : "");
        return;
    }
    if (reply.ok) return;
    auto* log = &ctx.log;
    const StopSignal* stop = &ctx.stop;
    auto self = *this;
    const std::string error_class = reply.error_class, message = reply.message;
    const auto give_up = reply.give_up == runner::GiveUp::kill      ? Failure::GiveUp::kill
                         : reply.give_up == runner::GiveUp::discard ? Failure::GiveUp::discard
                                                                    : Failure::GiveUp::no;
    RunnerFailure failure(reply.error_class, reply.message, reply.backtrace, reply.retry_in,
                          give_up,
                          [self, log, stop, error_class, message](const std::string& payload) {
                              self.exhausted(*log, *stop, payload, error_class, message);
                          });
    using Decision = Failure::Decision;
    switch (reply.decision) {
        case runner::Decision::none:
            break;
        case runner::Decision::retry:
            failure.decision = Decision::retry;
            failure.retry_at = reply.retry_at;
            break;
        case runner::Decision::dead:
            failure.decision = Decision::dead;
            break;
        case runner::Decision::discard:
            failure.decision = Decision::discard;
            break;
    }
    if (out.hold) {
        // The runner waits on the job's seat until the outcome is written, then runs Sidekiq's
        // death and error handlers and answers `done`.
        failure.after_write = [hold = out.hold, stop] { hold->finish(*stop, kExhaustedTimeout); };
    }
    throw failure;
}

void RunnerJobHandler::exhausted(spdlog::logger& log, const StopSignal& stop,
                                 const std::string& payload, const std::string& error_class,
                                 const std::string& message) const {
    // `payload` is the dead-set member kiqd just wrote: valid JSON, embedded as it is.
    const std::string data = "{\"job\":" + payload + ",\"error\":" +
                             nlohmann::json{{"class", error_class}, {"message", message}}.dump(
                                 -1, ' ', false, nlohmann::json::error_handler_t::replace) +
                             "}";
    const auto out = pool_->exchange(stop, {"exhausted", data, "", ""}, kExhaustedTimeout);
    if (out.end == RunnerEnd::answered || out.end == RunnerEnd::not_started) return;
    log.warn("runner={} pid {} did not confirm the retries-exhausted call ({})", pool_->spec().name,
             out.pid, out.problem.empty() ? "timeout or shutdown" : out.problem);
}

}  // namespace

RunnerPools::RunnerPools(const Config& config) {
    for (const auto& spec : config.runners)
        pools_[spec.name] =
            std::make_shared<RunnerPool>(spec, runner_environment(environ, config, spec));
}

RunnerPools::~RunnerPools() {
    stop();
}

std::shared_ptr<RunnerPool> RunnerPools::find(const std::string& name) const {
    auto it = pools_.find(name);
    return it == pools_.end() ? nullptr : it->second;
}

void RunnerPools::start(spdlog::logger& log) {
    for (auto& [name, pool] : pools_) pool->start(log);
    if (!pools_.empty()) g_active = this;
}

std::optional<runner::AppSettings> RunnerPools::app_settings() const {
    for (const auto& [name, pool] : pools_)
        if (auto s = pool->app_settings()) return s;
    return std::nullopt;
}

std::optional<runner::AppSettings> RunnerPools::await_app_settings() const {
    std::chrono::milliseconds longest{0};
    for (const auto& [name, pool] : pools_) longest = std::max(longest, pool->spec().boot_timeout);
    const auto until = RunnerPool::Clock::now() + longest;
    for (const auto& [name, pool] : pools_)
        if (auto s = pool->await_app_settings(until)) return s;
    return std::nullopt;
}

void RunnerPools::quiet(bool shutdown) const {
    for (auto& [name, pool] : pools_) pool->quiet(shutdown);
}

void RunnerPools::stop() {
    const RunnerPools* self = this;
    g_active.compare_exchange_strong(self, nullptr);
    for (auto& [name, pool] : pools_) pool->stop();
}

std::vector<RunnerChildInfo> RunnerPools::snapshot() const {
    std::vector<RunnerChildInfo> out;
    for (const auto& [name, pool] : pools_)
        for (auto& c : pool->snapshot()) out.push_back(std::move(c));
    return out;
}

std::vector<std::string> RunnerPools::boot_check() const {
    std::vector<std::string> problems;
    for (const auto& [name, pool] : pools_) {
        if (auto problem = RunnerPool::boot_once(pool->spec(), pool->environment()))
            problems.push_back(fmt::format("runners.{} (line {}): did not boot: {}", name,
                                           pool->spec().line, *problem));
    }
    return problems;
}

// The Handler of a runner entry: a named type, so that is_runner_handler can recognise it.
struct RunnerHandler {
    std::shared_ptr<const RunnerJobHandler> runner;
    void operator()(const Job& job, JobContext& ctx) const { (*runner)(job, ctx); }
};

void register_runner_handlers(const Config& config, HandlerRegistry& registry,
                              const RunnerPools& pools) {
    for (const auto& spec : config.runner_handlers) {
        if (spec.selector) continue;  // register_runner_selector_handlers, once classes are known
        auto pool = pools.find(spec.runner);
        if (!pool)
            throw ConfigError("handlers." + spec.job_class + ".runner", "unknown runner",
                              spec.line);
        registry.add(spec.job_class,
                     RunnerHandler{std::make_shared<const RunnerJobHandler>(pool, spec.timeout)});
    }
}

void register_runner_selector_handlers(const Config& config, const WorkerCatalog& catalog,
                                       HandlerRegistry& registry, const RunnerPools& pools) {
    std::vector<std::pair<WorkerSelector, const RunnerHandlerSpec*>> selectors;
    for (const auto& spec : config.runner_handlers)
        if (spec.selector) selectors.emplace_back(WorkerSelector::parse(spec.job_class), &spec);
    if (selectors.empty()) return;
    for (const auto& [job_class, entry] : catalog.entries()) {
        if (registry.has(job_class)) continue;  // its own handler wins
        for (const auto& [selector, spec] : selectors) {
            if (!selector.matches({job_class, entry.queue, entry.metadata})) continue;
            auto pool = pools.find(spec->runner);
            if (!pool)
                throw ConfigError("handlers." + spec->job_class + ".runner", "unknown runner",
                                  spec->line);
            registry.add(job_class, RunnerHandler{std::make_shared<const RunnerJobHandler>(
                                        pool, spec->timeout)});
            break;
        }
    }
}

bool is_runner_handler(const Handler& handler) {
    return handler.target<RunnerHandler>() != nullptr;
}

const RunnerPools* active_runner_pools() {
    return g_active.load();
}

std::string runner_slot_label(const RunnerChildInfo& c) {
    return c.slot < 0 ? "master" : std::to_string(c.slot);
}

void render_runner_metrics(std::string& out) {
    const RunnerPools* pools = active_runner_pools();
    if (!pools) return;
    const auto children = pools->snapshot();
    // Labelled by slot, not pid: a recycled child's successor continues its series (its jobs
    // counter restarts, which Prometheus reads as a counter reset).
    out +=
        "# HELP kiqd_runner_child_jobs_total Jobs the runner process in a slot has run since it "
        "started.\n"
        "# TYPE kiqd_runner_child_jobs_total counter\n";
    for (const auto& c : children)
        if (c.slot >= 0)
            out += fmt::format("kiqd_runner_child_jobs_total{{runner=\"{}\",slot=\"{}\"}} {}\n",
                               c.runner, c.slot, c.jobs);
    out +=
        "# HELP kiqd_runner_child_rss_bytes Resident memory of a runner process (slot \"master\": "
        "the preloading master).\n"
        "# TYPE kiqd_runner_child_rss_bytes gauge\n";
    for (const auto& c : children)
        out += fmt::format("kiqd_runner_child_rss_bytes{{runner=\"{}\",slot=\"{}\"}} {}\n",
                           c.runner, runner_slot_label(c), c.rss_bytes);
    out +=
        "# HELP kiqd_runner_child_pid The pid of the runner process in a slot.\n"
        "# TYPE kiqd_runner_child_pid gauge\n";
    for (const auto& c : children)
        out += fmt::format("kiqd_runner_child_pid{{runner=\"{}\",slot=\"{}\"}} {}\n", c.runner,
                           runner_slot_label(c), c.pid);
    out +=
        "# HELP kiqd_runner_child_state 1 for the state the runner process in a slot is in.\n"
        "# TYPE kiqd_runner_child_state gauge\n";
    for (const auto& c : children) {
        if (c.slot < 0) continue;
        for (const char* state : {"booting", "idle", "busy", "stopping"})
            out += fmt::format(
                "kiqd_runner_child_state{{runner=\"{}\",slot=\"{}\",state=\"{}\"}} {}\n", c.runner,
                c.slot, state, c.state == state ? 1 : 0);
    }
}

std::string runner_children_json() {
    const RunnerPools* pools = active_runner_pools();
    if (!pools) return "";
    nlohmann::json a = nlohmann::json::array();
    for (const auto& c : pools->snapshot()) {
        nlohmann::json row{{"runner", c.runner}, {"slot", runner_slot_label(c)},
                           {"pid", c.pid},       {"state", c.state},
                           {"jobs", c.jobs},     {"rss_kb", c.rss_bytes / 1024}};
        if (!c.jid.empty()) {
            row["class"] = c.job_class;
            row["jid"] = c.jid;
        }
        a.push_back(std::move(row));
    }
    return a.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kiqd
