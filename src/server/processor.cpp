#include "server/processor.hpp"

#include <cxxabi.h>

#include <cmath>
#include <typeinfo>

#include "common/log_fields.hpp"
#include "common/outcome_counters.hpp"
#include "fetch/cpu_gate.hpp"
#include "fetch/refill_acquirer.hpp"
#include "handlers/exec_handler.hpp"
#include "handlers/runner_handler.hpp"
#include "redis/transaction.hpp"
#include "server/connection_budget.hpp"
#include "server/execution_metrics.hpp"

namespace kiqd {
namespace {

// The fields every log line about a job starts with (class, jid, and queue unless left out).
LogLine job_line(const Job& job, bool with_queue = true) {
    LogLine line;
    line.field("class", job.display_class()).field("jid", job.jid);
    if (with_queue) line.field("queue", job.queue);
    return line;
}

std::string demangle(const char* name) {
    int status = 0;
    char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    std::string result = status == 0 && out ? out : name;
    std::free(out);
    return result;
}

double ms_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
}

}  // namespace

Processor::Processor(Runtime& rt, size_t slot, std::function<void()> on_exit, size_t fetch_slot)
    : rt_(rt),
      slot_(slot),
      fetch_slot_(fetch_slot == static_cast<size_t>(-1) ? slot : fetch_slot),
      on_exit_(std::move(on_exit)),
      rng_(std::random_device{}()) {}

Processor::~Processor() {
    if (thread_.joinable()) thread_.detach();
}

void Processor::start() {
    running_ = true;
    thread_ = std::thread([this] { run(); });
}

void Processor::join() {
    if (thread_.joinable()) thread_.join();
}

void Processor::detach() {
    if (thread_.joinable()) thread_.detach();
}

void Processor::run() noexcept {
    redis::Connection conn(named_connection(rt_.connection_options, rt_.identity,
                                            "processor-" + std::to_string(slot_)));
    std::chrono::milliseconds backoff{0};
    while (!rt_.lifecycle.is_quiet()) {
        try {
            const auto started = RedisHealth::Clock::now();
            auto unit = rt_.fetcher.retrieve_work(conn, rng_, fetch_slot_, pending_);
            // A job fetched by this call (not taken from a buffer): Redis took its move, a write
            // it refuses while out of memory, so writes work again.
            if (unit && unit->fetched_at >= started)
                rt_.health.wrote(started);
            else
                rt_.health.succeeded(started);
            backoff = std::chrono::milliseconds{0};
            if (!unit) continue;
            if (rt_.lifecycle.is_quiet()) {
                // Fetched after quiet: push it straight back to the front of its queue.
                write_with_pending(conn, rt_.fetcher.requeue_commands({*unit}), "requeue",
                                   unit->payload);
                break;
            }
            process(conn, std::move(*unit));
        } catch (const redis::Error& e) {
            rt_.health.failed(e);
            backoff = std::min(std::chrono::milliseconds(5000),
                               std::max(std::chrono::milliseconds(250), backoff * 2));
            rt_.lifecycle.wait_quiet_for(backoff);
        } catch (const std::exception& e) {
            // A bug, not an input problem: log it and keep the thread alive.
            rt_.log.critical("processor {} error: {}", rt_.work.tid(slot_), e.what());
            rt_.lifecycle.wait_quiet_for(std::chrono::milliseconds(1000));
        }
    }
    // Deferred acknowledgements and jobs still in the fetch buffer (put back in their queues).
    write_with_pending(conn, rt_.fetcher.release_commands(), "release of buffered jobs", "");
    // The first thread out closes the cpu gate and pushes its held jobs back (cpu_gate.hpp).
    std::vector<redis::Command> last;
    std::string held_payloads;
    if (rt_.cpu_gate) {
        auto held = rt_.cpu_gate->close();
        if (!held.empty()) {
            last = rt_.fetcher.requeue_commands(held);
            for (const auto& u : held) held_payloads += u.payload + "\n";
            rt_.log.info("pushed {} held cpu-bound job(s) back to their queues", held.size());
        }
    }
    write_with_pending(conn, std::move(last), "requeue/lock release", held_payloads);
    running_ = false;
    if (on_exit_) on_exit_();
}

bool Processor::write_until_done(redis::Connection& conn,
                                 const std::vector<redis::Command>& commands,
                                 const std::string& what, const std::string& payload,
                                 size_t checked) {
    if (commands.empty()) return true;
    std::chrono::milliseconds backoff{250};
    int tries_after_stop = 0;
    // After an outage or a refused write: false when it is time to give up (shutting down).
    auto wait_to_retry = [&] {
        if (rt_.lifecycle.hard_stop.stop_requested()) {
            // Shutting down: a few quick tries (the process exits soon), then the log.
            if (++tries_after_stop == 3) {
                rt_.log.error("shutdown while Redis is down: could not record the {} of: {}", what,
                              payload);
                return false;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            return true;
        }
        rt_.lifecycle.hard_stop.wait_for(backoff);
        backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
        return true;
    };
    for (;;) {
        try {
            const auto started = RedisHealth::Clock::now();
            const size_t own = std::min(checked, commands.size());
            auto replies = conn.pipeline_unchecked(commands);
            rt_.health.succeeded(started);
            // The after-job commands past `own` are unchecked; a release whose script Redis
            // forgot goes again with its source.
            redis::resend_noscript(conn, commands, replies, own, commands.size());
            for (size_t i = 0; i < own; ++i) {
                if (!replies[i].is_error()) continue;
                const std::string text(replies[i].error_text());
                // A Redis restarting from its AOF or RDB answers LOADING until it has read its
                // data: not a refusal, an outage. Given up on, a basic-fetch job's failure was
                // lost (found by bench/chaos.sh after a kill -9 of Redis).
                if (text.rfind("LOADING", 0) == 0) throw redis::Error(text);
                throw redis::ReplyError(text);
            }
            if (own > 0) rt_.health.wrote(started, RedisHealth::Write::any);
            return true;
        } catch (const redis::ReplyError& e) {
            if (RedisHealth::is_refusal(e.what())) {
                // Out of memory, a failed save, a replica: Redis takes writes again later, and
                // given up on, an acknowledgement would leave a finished job to run again.
                rt_.health.failed(e);
                if (!wait_to_retry()) return false;
                continue;
            }
            rt_.log.error("Redis refused the {} of a job ({}); payload: {}", what, e.what(),
                          payload);
            return false;  // retrying a refused command cannot help; the payload is in the log
        } catch (const redis::Error& e) {
            rt_.health.failed(e);
            if (!wait_to_retry()) return false;
        }
    }
}

void Processor::send_pending(redis::Connection& conn) {
    if (pending_.empty()) return;
    try {
        auto replies = conn.pipeline_unchecked(pending_);
        redis::resend_noscript(conn, pending_, replies, 0, replies.size());
        pending_.clear();
    } catch (const redis::Error& e) {
        rt_.health.failed(e);  // kept: they go out with the next write
    }
}

bool Processor::write_with_pending(redis::Connection& conn, std::vector<redis::Command> commands,
                                   const std::string& what, const std::string& payload) {
    const size_t own = commands.size();
    for (auto& c : pending_) commands.push_back(std::move(c));
    pending_.clear();
    return write_until_done(conn, commands, what, payload, own);
}

void Processor::record_outcome(redis::Connection& conn, const UnitOfWork& unit, Outcome outcome,
                               std::vector<redis::Command> writes, const std::string& payload,
                               bool acknowledge) {
    const bool done = outcome == Outcome::done;
    if (!acknowledge) {
        // A middleware already took the job out of the working list (JobContext::working_list):
        // an acknowledgement, a removal by value, would take an identical copy fetched since.
        for (auto& c : rt_.fetcher.unmark_started_commands(unit)) writes.push_back(std::move(c));
        if (!writes.empty())
            write_with_pending(conn, redis::in_transaction(std::move(writes)), "outcome", payload);
        return;
    }
    if (done && rt_.fetcher.defer_acknowledgement(unit, fetch_slot_)) return;
    auto commands = rt_.fetcher.with_acknowledgement(unit, std::move(writes));
    if (done && commands.empty()) return;
    static constexpr const char* kWhat[] = {"dead-set entry", "acknowledgement", "failure"};
    write_with_pending(conn, std::move(commands), kWhat[static_cast<int>(outcome)], payload);
}

Failure Processor::failure_from_current_exception(const Job& job) const {
    try {
        throw;
    } catch (const RunnerFailure& e) {
        Failure f{e.error_class(), e.what(), e.backtrace()};
        f.retry_in = e.retry_in;
        f.give_up = e.give_up;
        f.on_exhausted = e.on_exhausted;
        f.decision = e.decision;
        f.retry_at = e.retry_at;
        f.after_write = e.after_write;
        return f;
    } catch (const JobError& e) {
        auto bt = e.backtrace();
        if (bt.empty()) bt.push_back("kiqd:in `" + job.handler_name() + "'");
        return {e.error_class(), e.what(), std::move(bt)};
    } catch (const std::exception& e) {
        return {demangle(typeid(e).name()), e.what(), {"kiqd:in `" + job.handler_name() + "'"}};
    } catch (...) {
        return {"Exception", "unknown exception", {"kiqd:in `" + job.handler_name() + "'"}};
    }
}

void Processor::process(redis::Connection& conn, UnitOfWork unit) {
    if (!rt_.cpu_gate) return run_unit(conn, std::move(unit), nullptr);
    // The cpu-bound cap (cpu_gate.hpp): a cpu-bound job runs only with a cpu slot; otherwise it
    // is held and this thread fetches on. After a cpu-bound job, the slot passes to the oldest
    // held job, which this thread runs next.
    std::optional<UnitOfWork> next = std::move(unit);
    bool holding_slot = false;
    while (next) {
        UnitOfWork current = std::move(*next);
        next.reset();
        run_unit(conn, std::move(current), [&](UnitOfWork& u, const Job& job) {
            if (holding_slot || !rt_.cpu_gate->cpu_bound(job.handler_name())) return true;
            switch (rt_.cpu_gate->admit(u)) {
                case CpuGate::Admit::run:
                    holding_slot = true;
                    return true;
                case CpuGate::Admit::held:
                    rt_.log.debug("class={} jid={} queue={} held: {} cpu-bound jobs running",
                                  job.display_class(), job.jid, job.queue, rt_.cpu_gate->limit());
                    return false;
                case CpuGate::Admit::closed:
                    write_with_pending(conn, rt_.fetcher.requeue_commands({u}), "requeue",
                                       u.payload);
                    return false;
            }
            return true;
        });
        if (holding_slot) {
            next = rt_.cpu_gate->release();
            holding_slot = next.has_value();
        }
    }
}

void Processor::run_unit(redis::Connection& conn, UnitOfWork unit, const Admission& admit) {
    // A batched refill that acquired for this job parsed its payload already (same bytes, same
    // limits): parsing it again was a measurable part of a job's CPU.
    auto parsed = unit.acquired && unit.acquired->job
                      ? std::variant<Job, InvalidJob>(std::move(*unit.acquired->job))
                      : parse_job(unit.payload, unit.queue, rt_.limits);
    if (unit.acquired) unit.acquired->job.reset();
    if (auto* invalid = std::get_if<InvalidJob>(&parsed)) {
        increment(outcome_counters().unrunnable);
        increment(outcome_counters().dead);
        rt_.log.error("queue={} unrunnable payload sent to the dead set: {}: {}", unit.queue,
                      invalid->error_class, invalid->error_message);
        rt_.fetcher.release_acquired(unit, pending_);  // it never reaches its middlewares
        record_outcome(
            conn, unit, Outcome::unrunnable,
            rt_.dead.entry_commands(rt_.dead.invalid_entry(unit.payload, unit.queue, *invalid),
                                    epoch_seconds()),
            unit.payload);
        return;
    }
    Job& job = std::get<Job>(parsed);
    if (admit && !admit(unit, job)) return;
    if (auto mark = rt_.fetcher.mark_started_commands(unit); !mark.empty()) {
        // A recovered job's start must be in Redis before it runs, so that the poison-pill guard
        // counts it should it take the process down (reliable_fetcher.hpp).
        try {
            conn.pipeline(mark);
        } catch (const redis::Error& e) {
            rt_.health.failed(e);  // it runs anyway; only a crash in it would go uncounted
        }
    }
    const auto started = std::chrono::steady_clock::now();
    rt_.work.begin(slot_, RunningJob{job.queue, job.raw, job.display_class(), job.jid,
                                     static_cast<long long>(epoch_seconds()), started});
    // The two per-job lines are built only when they are written: at `level: warn` a job costs
    // no LogLine and no formatting (spdlog checks the level only after its arguments exist).
    const bool log_info = rt_.log.should_log(spdlog::level::info);
    if (log_info) rt_.log.info(job_line(job).message("start", "start"));

    JobContext ctx{job, rt_.log, rt_.lifecycle.hard_stop, conn, rt_.keys, rt_.config, rt_.identity};
    ctx.after_job = &pending_;
    ctx.client = rt_.client;
    ctx.working_list = rt_.fetcher.working_list(unit.queue);
    ctx.acquired = unit.acquired.get();
    ctx.after_refill = &after_refill_;
    std::optional<Failure> failure;
    bool interrupted = false;
    bool requeue = false;  // put back in its queue though kiqd is not stopping (RunnerRequeue)
    bool exec = false;     // an exec or runner handler: its normal return means the job is done
    try {
        rt_.chain.invoke(ctx, [&] {
            const Handler* handler = rt_.handlers.find(job.handler_name());
            if (!handler)
                throw JobError("NameError", "uninitialized constant " + job.handler_name() +
                                                " (no kiqd handler is registered for it)");
            exec = is_exec_handler(*handler) || is_runner_handler(*handler);
            // The previous job's lock releases, unless a middleware's round trip took them
            // along (a job from a batched fetch's buffer made none to fetch it): they must not
            // wait for this job to end.
            send_pending(conn);
            (*handler)(job, ctx);
        });
    } catch (const RunnerRequeue&) {
        interrupted = requeue = true;
    } catch (const Interrupted&) {
        interrupted = true;
    } catch (...) {
        failure = failure_from_current_exception(job);
    }
    // What the refill acquired for this job and no middleware claimed (one further out parked
    // it, or its class's options changed) is released like a lock release; the releases that
    // may wait ride with the next refill, else with this thread's next write.
    rt_.fetcher.release_acquired(unit, pending_);
    if (!after_refill_.empty() && !rt_.fetcher.defer_commands(after_refill_, fetch_slot_)) {
        for (auto& c : after_refill_) pending_.push_back(std::move(c));
        after_refill_.clear();
    }
    const bool stopped = rt_.lifecycle.hard_stop.stop_requested();
    if (!rt_.work.finish(slot_)) {
        // It ran on past the hard-shutdown grace: the manager took the job (manager.hpp), so
        // nothing more is recorded here.
        rt_.log.info(job_line(job, false)
                         .message("returned late", "returned after the shutdown gave it up"));
        write_with_pending(conn, {}, "lock release", job.raw);
        return;
    }
    // The job left the working list with a middleware's park (JobContext::working_list).
    const bool acknowledge = !(rt_.fetcher.working_list(unit.queue) && !ctx.working_list);
    // After the stop signal an in-process handler's normal return may be how it gave up (its
    // contract: return or throw Interrupted), so only an exec command's exit 0 counts as done;
    // a job whose handler never ran was parked by a middleware, which is its outcome.
    if (stopped && !failure && ctx.handler_ran && !exec) interrupted = true;
    if (interrupted && (stopped || requeue)) {
        if (acknowledge)
            push_back_interrupted(conn, unit, job, !requeue);
        else  // a middleware parked it first: that is its outcome
            record_outcome(conn, unit, Outcome::done, {}, job.raw, false);
        return;
    }
    if (interrupted && !failure)
        failure = Failure{"Kiqd::Interrupted",
                          "handler raised Interrupted without a shutdown",
                          {"kiqd:in `" + job.handler_name() + "'"}};
    const double elapsed = ms_since(started);
    // Sidekiq's execution metrics count what the stats count: runs of the handler, failures
    // included, timed in whole ms (execution_metrics.hpp): the logged time (3 decimals) cut to
    // its whole part, so the metrics can be checked against the log exactly.
    if (rt_.execution_metrics && (failure || ctx.handler_ran))
        rt_.execution_metrics->record(
            job.handler_name(), failure.has_value(),
            static_cast<long long>(std::floor(std::round(elapsed * 1000.0) / 1000.0)));
    if (!failure) {
        if (ctx.handler_ran) rt_.work.processed.fetch_add(1, std::memory_order_relaxed);
        // A job a middleware parked, or the app's throttling handed back, did not run: its
        // middleware logs why, and there is no done line.
        if (log_info && ctx.handler_ran)
            rt_.log.info(job_line(job)
                             .json_number("elapsed_ms", elapsed)
                             .tags(ctx.log_tags)
                             .message("done", fmt::format("done: {:.3f} ms", elapsed)));
        record_outcome(conn, unit, Outcome::done, {}, job.raw, acknowledge);
        return;
    }
    rt_.work.processed.fetch_add(1, std::memory_order_relaxed);
    rt_.work.failed.fetch_add(1, std::memory_order_relaxed);
    const RetryPlan plan = rt_.retry.plan(job, *failure, epoch_seconds(), rng_);
    static constexpr const char* kOutcome[] = {"retry scheduled", "sent to the dead set",
                                               "discarded (retry: false)"};
    const char* outcome = kOutcome[static_cast<int>(plan.outcome)];
    auto& counters = outcome_counters();
    increment(plan.outcome == FailureOutcome::Retried ? counters.retried
              : plan.outcome == FailureOutcome::Dead  ? counters.dead
                                                      : counters.discarded);
    rt_.log.warn(
        job_line(job)
            .json_number("elapsed_ms", elapsed)
            .json_field("error_class", failure->error_class)
            .json_field("error_message", failure->message)
            .json_field("outcome", outcome)
            .tags(ctx.log_tags)
            .message("fail", fmt::format("fail: {:.3f} ms: {}: {} ({})", elapsed,
                                         failure->error_class, failure->message, outcome)));
    record_outcome(conn, unit, Outcome::failed, rt_.retry.commands(plan),
                   plan.payload.empty() ? job.raw : plan.payload, acknowledge);
    // A runner's sidekiq_retries_exhausted and death handlers, once the entry is written; a
    // runner that decided the outcome itself goes on with Sidekiq's hooks after the write.
    if (plan.exhausted && failure->on_exhausted) failure->on_exhausted(plan.payload);
    if (failure->after_write) failure->after_write();
}

void Processor::push_back_interrupted(redis::Connection& conn, const UnitOfWork& unit,
                                      const Job& job, bool at_shutdown) {
    // Sidekiq counts an interrupted job as processed and failed
    // (docs/data-model.md#interrupted-jobs).
    rt_.work.processed.fetch_add(1, std::memory_order_relaxed);
    rt_.work.failed.fetch_add(1, std::memory_order_relaxed);
    if (rt_.execution_metrics) rt_.execution_metrics->record(job.handler_name(), true, 0);
    if (!write_with_pending(conn, rt_.fetcher.requeue_commands({unit}), "requeue", unit.payload))
        return;
    // The shutdown's count ("Pushed N jobs back") and kiqd_jobs_requeued_total are the hard
    // shutdown's alone; a job whose runner process was stopped under it is logged only.
    if (at_shutdown) rt_.work.requeued.fetch_add(1, std::memory_order_relaxed);
    const char* why = at_shutdown ? "interrupted by shutdown" : "its runner process was stopped";
    rt_.log.info(job_line(job, false)
                     .json_field("queue", job.queue)
                     .message("requeued", fmt::format("{}: back in queue:{}", why, job.queue)));
}

}  // namespace kiqd
