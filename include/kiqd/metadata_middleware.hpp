#pragma once
// MetadataMiddleware: the outermost server middleware (installed by the launcher unless
// `job_metadata: false`). For every job it
//   * looks up the class's worker metadata (WorkerCatalog) and adds urgency, resource boundary
//     and feature category to the job's done/fail log lines (JobContext::log_tags);
//   * measures the scheduling latency (enqueued_at → start), the run time (steady clock) and the
//     CPU time of the processor thread (CLOCK_THREAD_CPUTIME_ID, read once per job: since the
//     thread's previous job ended, so kiqd's own dispatch of the job is in it; the work of an
//     exec handler's child process is not);
//   * judges the job against its urgency's targets and records all of it in JobMetrics.
// A job a later middleware parked (handler never reached, no exception) is not counted; an
// Interrupted job (hard shutdown, already requeued) neither. Stateless apart from the shared
// catalog and metrics: safe on every processor thread at once.
#include "kiqd/job_metrics.hpp"
#include "kiqd/middleware_chain.hpp"
#include "kiqd/worker_catalog.hpp"

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
