#include "middleware/job_metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace kiqd {
namespace {

std::atomic<unsigned long long> next_id{1};

// Prometheus wants Go's float formatting; %.17g round-trips and integers print bare.
std::string number(double v) {
    return fmt::format("{}", v);
}

}  // namespace

std::string prometheus_escape(const std::string& value) {
    std::string out;
    out.reserve(value.size());
    for (char c : value) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '"')
            out += "\\\"";
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

JobMetrics::JobMetrics() : id_(next_id.fetch_add(1)) {}

const std::vector<double>& JobMetrics::buckets() {
    static const std::vector<double> b{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,  1,   2.5,
                                       5,     10,    30,   60,    120,  300, 600,  1800, 3600};
    return b;
}

void JobMetrics::Histogram::observe(double v) {
    const auto& b = buckets();
    if (counts.empty()) counts.assign(b.size() + 1, 0);
    const size_t i = std::lower_bound(b.begin(), b.end(), v) - b.begin();  // le: v <= bound
    ++counts[i];
    sum += v;
    ++count;
}

void JobMetrics::Histogram::add(const Histogram& h) {
    if (h.counts.empty()) return;
    if (counts.empty()) counts.assign(h.counts.size(), 0);
    for (size_t i = 0; i < counts.size(); ++i) counts[i] += h.counts[i];
    sum += h.sum;
    count += h.count;
}

JobMetrics::Shard& JobMetrics::local() {
    // One shard per (thread, JobMetrics object); the id, not the address, identifies the object.
    struct Cache {
        unsigned long long id = 0;
        Shard* shard = nullptr;
    };
    thread_local Cache cache;
    if (cache.id == id_) return *cache.shard;
    std::lock_guard lock(shards_mutex_);
    shards_.push_back(std::make_unique<Shard>());
    cache = {id_, shards_.back().get()};
    return *cache.shard;
}

JobMetrics::Verdict JobMetrics::judge(const Observation& o) {
    const auto t = targets_of(o.urgency);
    Verdict v;
    if (t.scheduling && o.scheduling_seconds)
        v.scheduling_met = *o.scheduling_seconds <= t.scheduling->count() / 1000.0;
    if (t.execution) v.execution_met = o.run_seconds <= t.execution->count() / 1000.0;
    return v;
}

JobMetrics::Verdict JobMetrics::record(const Observation& o) {
    const Verdict v = judge(o);
    Shard& shard = local();
    thread_local std::string key;
    key.assign(o.job_class).append(1, '\x1f').append(o.queue).append(1, '\x1f');
    key.append(1, static_cast<char>('0' + static_cast<int>(o.urgency)));
    std::lock_guard lock(shard.mutex);  // uncontended except during a scrape
    auto it = shard.series.find(key);
    if (it == shard.series.end()) {
        Series s;
        s.job_class = o.job_class;
        s.queue = o.queue;
        s.urgency = o.urgency;
        it = shard.series.emplace(key, std::move(s)).first;
    }
    Series& s = it->second;
    ++s.processed;
    if (o.failed) ++s.failed;
    shard.cpu_pending.emplace_back(&s, o.run_seconds);
    shard.cpu_pending_run += o.run_seconds;
    if (o.cpu_seconds) {
        const size_t n = shard.cpu_pending.size();
        for (auto& [series, run] : shard.cpu_pending)
            series->cpu_seconds += shard.cpu_pending_run > 0
                                       ? *o.cpu_seconds * run / shard.cpu_pending_run
                                       : *o.cpu_seconds / static_cast<double>(n);
        shard.cpu_pending.clear();
        shard.cpu_pending_run = 0;
    }
    if (o.scheduling_seconds) s.scheduling.observe(*o.scheduling_seconds);
    s.run.observe(o.run_seconds);
    auto& slo = shard.slo[static_cast<int>(o.urgency)];
    if (v.scheduling_met) ++slo[0][*v.scheduling_met ? 0 : 1];
    if (v.execution_met) ++slo[1][*v.execution_met ? 0 : 1];
    return v;
}

void JobMetrics::render(std::string& out) const {
    std::map<std::string, Series> all;  // sorted: stable output
    SloCounts slo{};
    {
        std::lock_guard lock(shards_mutex_);
        for (const auto& shard : shards_) {
            std::lock_guard shard_lock(shard->mutex);
            for (const auto& [key, s] : shard->series) {
                auto [it, fresh] = all.try_emplace(key, Series{});
                Series& t = it->second;
                if (fresh) {
                    t.job_class = s.job_class;
                    t.queue = s.queue;
                    t.urgency = s.urgency;
                }
                t.processed += s.processed;
                t.failed += s.failed;
                t.cpu_seconds += s.cpu_seconds;
                t.scheduling.add(s.scheduling);
                t.run.add(s.run);
            }
            for (size_t u = 0; u < 3; ++u)
                for (size_t t = 0; t < 2; ++t)
                    for (size_t r = 0; r < 2; ++r) slo[u][t][r] += shard->slo[u][t][r];
        }
    }
    // `worker` repeats `class`: the label name yabeda-sidekiq's dashboards use for the job class,
    // so their queries work unchanged; `class` stays for kiqd's own. Same values, so no extra
    // series.
    auto labels = [](const Series& s) {
        const std::string cls = prometheus_escape(s.job_class);
        return fmt::format("class=\"{}\",worker=\"{}\",queue=\"{}\",urgency=\"{}\"", cls, cls,
                           prometheus_escape(s.queue), to_string(s.urgency));
    };
    auto counter = [&](const char* name, const char* help, auto value) {
        out += fmt::format("# HELP {} {}\n# TYPE {} counter\n", name, help, name);
        for (const auto& [k, s] : all)
            out += fmt::format("{}{{{}}} {}\n", name, labels(s), value(s));
    };
    counter("kiqd_jobs_processed_total", "Jobs run by this process, failed ones included.",
            [](const Series& s) { return number(static_cast<double>(s.processed)); });
    counter("kiqd_jobs_failed_total", "Jobs that raised (retried, dead or discarded).",
            [](const Series& s) { return number(static_cast<double>(s.failed)); });
    counter("kiqd_job_cpu_seconds_total", "CPU time of the processor thread while jobs ran.",
            [](const Series& s) { return number(s.cpu_seconds); });
    auto histogram = [&](const char* name, const char* help, Histogram Series::*field) {
        out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
        const auto& b = buckets();
        for (const auto& [k, s] : all) {
            const Histogram& h = s.*field;
            const std::string l = labels(s);
            unsigned long long cumulative = 0;
            for (size_t i = 0; i < b.size(); ++i) {
                cumulative += h.counts.empty() ? 0 : h.counts[i];
                out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, l, number(b[i]),
                                   cumulative);
            }
            out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, l, h.count);
            out += fmt::format("{}_sum{{{}}} {}\n", name, l, number(h.sum));
            out += fmt::format("{}_count{{{}}} {}\n", name, l, h.count);
        }
    };
    histogram("kiqd_job_scheduling_latency_seconds",
              "Time from enqueued_at to the start of the job.", &Series::scheduling);
    histogram("kiqd_job_run_seconds", "Run time of jobs (middleware and handler).", &Series::run);
    static const char* target_names[] = {"scheduling", "execution"};
    static const char* result_names[] = {"met", "missed"};
    for (int t = 0; t < 2; ++t) {
        for (int r = 0; r < 2; ++r) {
            const std::string name =
                fmt::format("kiqd_slo_{}_{}_total", target_names[t], result_names[r]);
            out += fmt::format(
                "# HELP {} Jobs that {} their urgency's {} target (high 10 s/10 s, low 60 s/300 "
                "s, throttled none/300 s).\n# TYPE {} counter\n",
                name, result_names[r], target_names[t], name);
            for (Urgency u : {Urgency::high, Urgency::low, Urgency::throttled}) {
                if (t == 0 && !targets_of(u).scheduling) continue;  // no target, no series
                out += fmt::format("{}{{urgency=\"{}\"}} {}\n", name, to_string(u),
                                   slo[static_cast<int>(u)][t][r]);
            }
        }
    }
}

}  // namespace kiqd
