#include "middleware/metadata_middleware.hpp"

#include <fmt/format.h>

#include <ctime>

#include "kiqd/clock.hpp"

namespace kiqd {

double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

void MetadataMiddleware::call(JobContext& ctx, const Next& next) const {
    const Job& job = ctx.job;
    const WorkerMetadata& md = catalog_.metadata(job.handler_name());
    // The tags are only built when a line will carry them: done lines are info, fail lines warn.
    const bool info = ctx.log.should_log(spdlog::level::info);
    auto tag = [&] {
        ctx.log_tags = fmt::format(" urgency={} resource_boundary={}", to_string(md.urgency),
                                   to_string(md.resource_boundary));
        if (!md.feature_category.empty())
            ctx.log_tags += fmt::format(" feature_category={}", md.feature_category);
    };

    std::optional<double> scheduling;
    if (auto enqueued = job.enqueued_at()) scheduling = std::max(0.0, epoch_seconds() - *enqueued);
    const auto started = std::chrono::steady_clock::now();
    // The thread's CPU clock is a system call (no vDSO), and on this VM reading it twice per
    // job cost 13 % of a no-op drain's throughput (batched c10: 115k -> 129k jobs/s without
    // it). So a reading closes a span of the thread's jobs rather than one job: every job when
    // its line shows cpu= (info level, or a failure), else at most once per millisecond per
    // thread, and JobMetrics shares the span's CPU among its jobs by run time. A span includes
    // kiqd's own dispatch of its jobs (fetch, parse, middleware: microseconds); a thread blocked
    // waiting for work uses no CPU.
    thread_local double cpu_mark = -1;  // the thread's CPU clock at its last reading
    thread_local std::chrono::steady_clock::time_point mark_time;
    if (cpu_mark < 0) {
        cpu_mark = thread_cpu_seconds();
        mark_time = started;
    }
    bool failed = false;
    auto finish = [&] {
        JobMetrics::Observation o{job.handler_name(), job.queue, md.urgency};
        o.failed = failed;
        o.scheduling_seconds = scheduling;
        const auto ended = std::chrono::steady_clock::now();
        o.run_seconds = std::chrono::duration<double>(ended - started).count();
        if (info || failed || ended - mark_time >= std::chrono::milliseconds(1)) {
            const double cpu_now = thread_cpu_seconds();
            o.cpu_seconds = cpu_now - cpu_mark;
            cpu_mark = cpu_now;
            mark_time = ended;
        }
        const auto verdict = metrics_.record(o);
        if (!info && !failed) return;
        tag();
        if (scheduling) ctx.log_tags += fmt::format(" scheduling_latency={:.3f}s", *scheduling);
        ctx.log_tags += fmt::format(" cpu={:.3f}ms", o.cpu_seconds.value_or(0) * 1000.0);
        if (verdict.scheduling_met == false || verdict.execution_met == false)
            ctx.log_tags += fmt::format(
                " slo=missed({}{}{})", verdict.scheduling_met == false ? "scheduling" : "",
                verdict.scheduling_met == false && verdict.execution_met == false ? "," : "",
                verdict.execution_met == false ? "execution" : "");
    };
    try {
        next();
    } catch (const Interrupted&) {
        throw;  // already back in its queue: neither processed nor failed here
    } catch (...) {
        failed = true;
        finish();
        throw;
    }
    if (ctx.handler_ran) finish();
}

}  // namespace kiqd
