#pragma once
// MetadataMiddleware: the outermost server middleware (installed by the launcher unless
// `job_metadata: false`). For every job it
//   * looks up the class's worker metadata (WorkerCatalog) and adds urgency, resource boundary
//     and feature category to the job's done/fail log lines (JobContext::log_tags);
//   * measures the scheduling latency (enqueued_at → start), the run time (steady clock) and the
//     CPU time of the processor thread (CLOCK_THREAD_CPUTIME_ID; read at the end of every job
//     whose line shows it, else at most once per millisecond per thread, the span's CPU shared
//     among its jobs by run time; kiqd's own dispatch is in it, an exec handler's child is not);
//   * judges the job against its urgency's targets and records all of it in JobMetrics.
// A job a later middleware parked (handler never reached, no exception) is not counted; an
// Interrupted job (hard shutdown, already requeued) neither. Stateless apart from the shared
// catalog and metrics: safe on every processor thread at once.
#include "config/worker_catalog.hpp"
#include "kiqd/middleware_chain.hpp"
#include "middleware/job_metrics.hpp"

namespace kiqd {

class MetadataMiddleware final : public ServerMiddleware {
  public:
    MetadataMiddleware(const WorkerCatalog& catalog, JobMetrics& metrics)
        : catalog_(catalog), metrics_(metrics) {}
    std::string_view name() const override { return "job_metadata"; }
    void call(JobContext& ctx, const Next& next) const override;

  private:
    const WorkerCatalog& catalog_;
    JobMetrics& metrics_;
};

// CPU time of the calling thread in seconds.
double thread_cpu_seconds();

}  // namespace kiqd
