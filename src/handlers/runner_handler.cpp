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
#include "handlers/child_environment.hpp"
#include "handlers/child_spawn.hpp"
#include "handlers/runner_protocol.hpp"
#include "kiqd/deadline.hpp"

extern char** environ;

namespace kiqd {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const milliseconds kTimeoutGrace{5000};   // a timed-out job's SIGTERM → SIGKILL
const milliseconds kShutdownGrace{2000};  // the hard shutdown's, as for exec commands
const milliseconds kExhaustedTimeout{30000};

std::atomic<const RunnerPools*> g_active{nullptr};

// How one request/answer on a leased child ended.
struct Exchange {
    enum class End { reply, crashed, timed_out, stopped } end = End::crashed;
    std::optional<runner::Reply> reply;
    std::string problem;   // crashed: what went wrong on the socket
    bool garbled = false;  // crashed: the child answered with a malformed frame or reply
    bool reply_after_stop = false;
};

// Sends the rest of `request` (acquire sent lease.sent bytes of it) and waits for the answer,
// the timeout, or the stop signal. On timeout or stop it signals the child's group (SIGTERM,
// SIGKILL after the grace) and returns once the child has answered or is gone.
Exchange exchange(RunnerPool& pool, const RunnerLease& lease, const std::string& request,
                  const StopSignal& stop, std::optional<milliseconds> timeout) {
    Exchange ex;
    runner::FrameReader reader;
    size_t written = lease.sent;
    const auto started = Clock::now();
    const auto deadline =
        timeout ? saturating_deadline(started, *timeout) : Clock::time_point::max();
    auto kill_at = Clock::time_point::max();
    bool stopping = false, timed_out = false, killed = false;
    char buf[65536];
    for (;;) {
        const auto now = Clock::now();
        if (!stopping && !timed_out && stop.stop_requested()) {
            stopping = true;
            pool.signal(lease, SIGTERM);
            kill_at = saturating_deadline(now, kShutdownGrace);
        } else if (!stopping && !timed_out && now >= deadline) {
            timed_out = true;
            pool.signal(lease, SIGTERM);
            kill_at = saturating_deadline(now, kTimeoutGrace);
        }
        if (!killed && now >= kill_at) {
            pool.signal(lease, SIGKILL);
            killed = true;
        }
        pollfd p{lease.socket,
                 static_cast<short>(POLLIN | (written < request.size() ? POLLOUT : 0)), 0};
        auto wake = std::min({deadline, kill_at, now + milliseconds(100)});
        const auto wait = std::chrono::duration_cast<milliseconds>(wake - now).count();
        ::poll(&p, 1, static_cast<int>(std::clamp<long long>(wait, 0, 100)));
        if ((p.revents & POLLOUT) && written < request.size()) {
            const ssize_t w = ::send(lease.socket, request.data() + written,
                                     request.size() - written, MSG_NOSIGNAL);
            if (w > 0) written += static_cast<size_t>(w);
        }
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            const ssize_t n = ::recv(lease.socket, buf, sizeof buf, 0);
            if (n > 0) {
                reader.feed(buf, static_cast<size_t>(n));
                if (auto frame = reader.next()) {
                    std::string error;
                    ex.reply = runner::parse_reply(*frame, error);
                    if (!ex.reply) {
                        ex.problem = "answered with " + error;
                        ex.end = Exchange::End::crashed;
                        ex.garbled = true;
                        return ex;
                    }
                    ex.end = Exchange::End::reply;
                    ex.reply_after_stop = stopping;
                    if (!timed_out) return ex;
                } else if (reader.malformed()) {
                    ex.problem = "answered with " + reader.error();
                    ex.end = Exchange::End::crashed;
                    ex.garbled = true;
                    return ex;
                }
            } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
                // End of file: the child is gone (or closed its socket).
                if (stopping)
                    ex.end = Exchange::End::stopped;
                else if (timed_out)
                    ex.end = Exchange::End::timed_out;
                else {
                    ex.end = Exchange::End::crashed;
                    ex.problem = reader.pending() ? "closed its socket in the middle of a reply"
                                                  : "closed its socket";
                }
                return ex;
            }
        }
    }
}

// Waits until the child is gone; its wait status when it was reaped within the time.
// `let_exit`: a child that closed its socket may still be exiting on its own; its own status is
// the better message, so it gets a moment before SIGKILL.
std::optional<int> kill_and_reap(RunnerPool& pool, const RunnerLease& lease, bool let_exit) {
    if (let_exit)
        if (auto status = pool.wait_reaped(lease, Clock::now() + milliseconds(1000))) return status;
    pool.signal(lease, SIGKILL);
    return pool.wait_reaped(lease, Clock::now() + milliseconds(5000));
}

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
    const std::string frame = runner::encode_frame("job", job.raw);
    auto lease = pool_->acquire(ctx.stop, {frame, job.display_class(), job.jid});
    if (!lease) throw Interrupted();  // the job never reached a runner
    const std::string& name = pool_->spec().name;
    const Exchange ex = exchange(*pool_, *lease, frame, ctx.stop, timeout_);
    const pid_t pid = lease->pid;
    if (ex.end == Exchange::End::reply && !ex.reply_after_stop) {
        pool_->release(*lease, RunnerRelease::ok);
    } else {
        // Whatever else happened, this child is done: it goes before the job is requeued or
        // retried, so that no other process can run the job while it still does.
        // A garbled reply is killed at once; anything else may be exiting on its own.
        const auto status = kill_and_reap(*pool_, *lease, !ex.garbled);
        if (ex.end == Exchange::End::crashed) {
            const std::string how = status ? describe_wait_status(*status) : "did not exit";
            const std::string tail = pool_->stderr_tail(*lease);
            pool_->release(*lease, RunnerRelease::broken);
            throw JobError(
                "Kiqd::RunnerCrashed",
                fmt::format("runner {} pid {} {} while running the job ({}){}", name, pid, how,
                            ex.problem, tail),
                {fmt::format("runner {}: {}", name, fmt::join(pool_->spec().argv, " "))});
        }
        pool_->release(*lease, RunnerRelease::broken);
        if (ex.end == Exchange::End::timed_out) {
            increment(outcome_counters().runner_timeouts);
            throw JobError(
                "Kiqd::Timeout",
                fmt::format("runner {} pid {} did not finish the job within {:g} s "
                            "(sent SIGTERM)",
                            name, pid, timeout_->count() / 1000.0),
                {fmt::format("runner {}: {}", name, fmt::join(pool_->spec().argv, " "))});
        }
        if (ex.end == Exchange::End::stopped) {
            ctx.log.info("class={} jid={} runner={} pid {} stopped by shutdown",
                         job.display_class(), job.jid, name, pid);
            throw Interrupted();
        }
        // A reply that arrived during the shutdown grace: the job did finish.
    }
    const auto& reply = *ex.reply;
    if (reply.ok) return;
    auto* log = &ctx.log;
    const StopSignal* stop = &ctx.stop;
    auto self = *this;
    const std::string error_class = reply.error_class, message = reply.message;
    throw RunnerFailure(reply.error_class, reply.message, reply.backtrace, reply.retry_in,
                        [self, log, stop, error_class, message](const std::string& payload) {
                            self.exhausted(*log, *stop, payload, error_class, message);
                        });
}

void RunnerJobHandler::exhausted(spdlog::logger& log, const StopSignal& stop,
                                 const std::string& payload, const std::string& error_class,
                                 const std::string& message) const {
    // `payload` is the dead-set member kiqd just wrote: valid JSON, embedded as it is.
    const std::string data = "{\"job\":" + payload + ",\"error\":" +
                             nlohmann::json{{"class", error_class}, {"message", message}}.dump(
                                 -1, ' ', false, nlohmann::json::error_handler_t::replace) +
                             "}";
    const std::string frame = runner::encode_frame("exhausted", data);
    auto lease = pool_->acquire(stop, {frame, "", ""});
    if (!lease) return;
    const Exchange ex = exchange(*pool_, *lease, frame, stop, kExhaustedTimeout);
    if (ex.end == Exchange::End::reply && !ex.reply_after_stop) {
        pool_->release(*lease, RunnerRelease::ok);
        return;
    }
    kill_and_reap(*pool_, *lease, false);
    pool_->release(*lease, RunnerRelease::broken);
    log.warn("runner={} pid {} did not confirm the retries-exhausted call ({})", pool_->spec().name,
             lease->pid, ex.problem.empty() ? "timeout or shutdown" : ex.problem);
}

}  // namespace

RunnerPools::RunnerPools(const Config& config)
    : env_(child_environment(environ, kiqd_secrets(config))) {
    for (const auto& spec : config.runners)
        pools_[spec.name] = std::make_shared<RunnerPool>(spec, env_);
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
        if (auto problem = RunnerPool::boot_once(pool->spec(), env_))
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
        auto pool = pools.find(spec.runner);
        if (!pool)
            throw ConfigError("handlers." + spec.job_class + ".runner", "unknown runner",
                              spec.line);
        registry.add(spec.job_class,
                     RunnerHandler{std::make_shared<const RunnerJobHandler>(pool, spec.timeout)});
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
