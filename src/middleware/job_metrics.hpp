#pragma once
// JobMetrics: per-job Prometheus series kept in process memory, written by the processor
// threads (through the metadata middleware) and read by the metrics server thread:
//   kiqd_jobs_processed_total / kiqd_jobs_failed_total          {class, queue, urgency}
//   kiqd_job_scheduling_latency_seconds (histogram)             {class, queue, urgency}
//   kiqd_job_run_seconds (histogram)                            {class, queue, urgency}
//   kiqd_job_cpu_seconds_total                                  {class, queue, urgency}
//   kiqd_slo_{scheduling,execution}_{met,missed}_total          {urgency}
// Lock-cheap: each writing thread owns a shard (found through a thread_local cache) with its own
// mutex, which only a scrape ever contends for; a scrape locks the shards one at a time and sums
// them. Nothing here touches Redis.
#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiqd/worker_metadata.hpp"

namespace kiqd {

class JobMetrics {
  public:
    JobMetrics();
    // Bucket upper bounds in seconds, shared by both histograms: sub-millisecond jobs up to the
    // hour-long ones, with the SLO targets (10 s, 60 s, 300 s) as boundaries.
    static const std::vector<double>& buckets();

    struct Observation {
        const std::string& job_class;
        const std::string& queue;
        Urgency urgency;
        bool failed = false;
        std::optional<double> scheduling_seconds{};  // nullopt: the payload had no enqueued_at
        double run_seconds = 0;
        // The thread's CPU time since its previous reading, when the caller took one at the end
        // of this job. The jobs the thread finished since that reading (this one included)
        // share it in proportion to their run time; nullopt: no reading, the job waits for the
        // thread's next one.
        std::optional<double> cpu_seconds{};
    };
    enum class Target { scheduling = 0, execution = 1 };
    struct Verdict {
        std::optional<bool> scheduling_met;  // nullopt: no target (throttled) or no enqueued_at
        std::optional<bool> execution_met;
    };
    // The job judged against its urgency's targets (worker_metadata.hpp), not recorded.
    static Verdict judge(const Observation& o);
    // Records one job and returns its verdict. Processor threads; lock-cheap.
    Verdict record(const Observation& o);

    // Appends the Prometheus text exposition of every series (metrics server thread).
    void render(std::string& out) const;

  private:
    struct Histogram {
        std::vector<unsigned long long> counts;  // per bucket, not cumulative; last = +Inf
        double sum = 0;
        unsigned long long count = 0;
        void observe(double v);
        void add(const Histogram& h);
    };
    struct Series {
        std::string job_class, queue;
        Urgency urgency = Urgency::low;
        unsigned long long processed = 0, failed = 0;
        double cpu_seconds = 0;
        Histogram scheduling, run;
    };
    // [urgency][target][met=0/missed=1]
    using SloCounts = std::array<std::array<std::array<unsigned long long, 2>, 2>, 3>;
    struct Shard {
        std::mutex mutex;
        std::unordered_map<std::string, Series> series;  // key: class \x1f queue \x1f urgency
        SloCounts slo{};
        // Jobs of this thread waiting for a CPU reading: their series (node-based map: stable
        // pointers) and run time.
        std::vector<std::pair<Series*, double>> cpu_pending;
        double cpu_pending_run = 0;
    };
    Shard& local();

    const unsigned long long id_;  // tells this object from an earlier one at the same address
    mutable std::mutex shards_mutex_;
    std::vector<std::unique_ptr<Shard>> shards_;
};

// Prometheus label-value escaping: backslash, double quote and newline.
std::string prometheus_escape(const std::string& value);

}  // namespace kiqd
