// ExecutionMetrics: Sidekiq 7/8's execution metrics counted in memory and written with the beat
// (see execution_metrics.hpp for the keys).
#include "server/execution_metrics.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kiqd {
namespace {

constexpr const char* kShortTerm = "28800";  // 8 hours: minute hashes and histograms (7 and 8)
constexpr const char* kMidTerm = "259200";   // 3 days: Sidekiq 8's ten-minute hashes

std::tm utc(std::time_t t) {
    std::tm tm{};
    gmtime_r(&t, &tm);
    return tm;
}

// The HINCRBYs of one "j|" hash and its EXPIRE.
void add_hash(std::vector<redis::Command>& out, const std::string& key,
              const ExecutionMetrics::Batch& batch, const char* ttl) {
    for (const auto& [klass, c] : batch) {
        out.push_back({"HINCRBY", key, klass + "|p", std::to_string(c.processed)});
        if (c.failed) out.push_back({"HINCRBY", key, klass + "|f", std::to_string(c.failed)});
        // Sidekiq's tracker adds to ms only when a run did not fail; a batch of failures alone
        // leaves the field absent, as there.
        if (c.processed > c.failed)
            out.push_back({"HINCRBY", key, klass + "|ms", std::to_string(c.ms)});
    }
    out.push_back({"EXPIRE", key, ttl});
}

// One class's histogram: BITFIELD <key> OVERFLOW SAT INCRBY u16 #i n ... (non-zero buckets),
// then EXPIRE. A class whose runs all failed has no histogram, as in Sidekiq (only timed runs
// create one).
void add_histogram(std::vector<redis::Command>& out, const std::string& key,
                   const ExecutionMetrics::ClassCounts& c) {
    if (c.processed <= c.failed) return;
    redis::Command bitfield{"BITFIELD", key, "OVERFLOW", "SAT"};
    for (size_t i = 0; i < c.histogram.size(); ++i) {
        if (c.histogram[i] == 0) continue;
        bitfield.insert(bitfield.end(),
                        {"INCRBY", "u16", "#" + std::to_string(i), std::to_string(c.histogram[i])});
    }
    out.push_back(std::move(bitfield));
    out.push_back({"EXPIRE", key, kShortTerm});
}

}  // namespace

const std::array<double, ExecutionMetrics::kBuckets>& ExecutionMetrics::bucket_bounds() {
    // Sidekiq's Histogram::BUCKET_INTERVALS (lib/sidekiq/metrics/shared.rb, the same in 7 and 8).
    static const std::array<double, kBuckets> b{
        20,   30,   45,   65,    100,   150,   225,   335,   500,    750,    1100,   1700,   2500,
        3800, 5750, 8500, 13000, 20000, 30000, 45000, 65000, 100000, 150000, 225000, 335000, 1e20};
    return b;
}

size_t ExecutionMetrics::bucket_of(long long ms) {
    const auto& b = bucket_bounds();
    // The first bound strictly above ms ("break idx if ms < BUCKET_INTERVALS[idx]").
    const auto it = std::upper_bound(b.begin(), b.end(), static_cast<double>(ms));
    return std::min(static_cast<size_t>(it - b.begin()), kBuckets - 1);
}

void ExecutionMetrics::enable(Layouts layouts) {
    v7_.store(layouts.v7, std::memory_order_relaxed);
    v8_.store(layouts.v8, std::memory_order_relaxed);
}

ExecutionMetrics::Layouts ExecutionMetrics::layouts() const {
    return {v7_.load(std::memory_order_relaxed), v8_.load(std::memory_order_relaxed)};
}

void ExecutionMetrics::record(std::string_view job_class, bool failed, long long ms) {
    if (!layouts().any()) return;
    std::lock_guard lock(mutex_);  // a map update per job; Sidekiq's tracker takes a lock too
    auto it = counts_.find(job_class);
    if (it == counts_.end()) it = counts_.emplace(std::string(job_class), ClassCounts{}).first;
    ClassCounts& c = it->second;
    ++c.processed;
    if (failed) {
        ++c.failed;
        return;
    }
    c.ms += std::max(0LL, ms);
    ++c.histogram[bucket_of(ms)];
}

ExecutionMetrics::Batch ExecutionMetrics::take() {
    std::lock_guard lock(mutex_);
    Batch out;
    out.swap(counts_);
    return out;
}

std::vector<redis::Command> ExecutionMetrics::flush_commands(const Batch& batch, const Keys& keys,
                                                             std::time_t now, Layouts layouts) {
    std::vector<redis::Command> out;
    if (batch.empty()) return out;
    const std::tm t = utc(now);
    if (layouts.v7) {
        // 7.3: "j|%Y%m%d|%-H:%-M" and "<Class>-%d-%H:%-M".
        add_hash(out,
                 keys.metrics_hash(fmt::format("{:04}{:02}{:02}|{}:{}", t.tm_year + 1900,
                                               t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min)),
                 batch, kShortTerm);
        for (const auto& [klass, c] : batch)
            add_histogram(out,
                          keys.metrics_histogram(fmt::format("{}-{:02}-{:02}:{}", klass, t.tm_mday,
                                                             t.tm_hour, t.tm_min)),
                          c);
    }
    if (layouts.v8) {
        // 8.0: "j|%y%m%d|%-H:%M" for the minute, the same less its last digit for the ten
        // minutes, and "h|<Class>-%-d-%-H:%-M".
        const std::string minute = fmt::format("{:02}{:02}{:02}|{}:{:02}", t.tm_year % 100,
                                               t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min);
        add_hash(out, keys.metrics_hash(minute), batch, kShortTerm);
        add_hash(out, keys.metrics_hash(minute.substr(0, minute.size() - 1)), batch, kMidTerm);
        for (const auto& [klass, c] : batch)
            add_histogram(out,
                          keys.metrics_histogram(
                              fmt::format("h|{}-{}-{}:{}", klass, t.tm_mday, t.tm_hour, t.tm_min)),
                          c);
    }
    return out;
}

}  // namespace kiqd
