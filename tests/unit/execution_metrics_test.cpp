// Sidekiq 7/8's execution metrics: the in-memory counts and the commands that write them, key by
// key as Sidekiq 7.3 (lib/sidekiq/metrics/tracking.rb, shared.rb) and 8.0 write them.
#include "server/execution_metrics.hpp"

#include <catch2/catch.hpp>
#include <ctime>
#include <string>
#include <vector>

using kiqd::ExecutionMetrics;
using kiqd::Keys;

namespace {

// 2026-02-05 08:03:41 UTC: single-digit month, day, hour and minute, so every padding shows.
constexpr std::time_t kAt = 1770278621;

std::vector<std::string> joined(const std::vector<kiqd::redis::Command>& cmds) {
    std::vector<std::string> out;
    for (const auto& c : cmds) {
        std::string line;
        for (const auto& a : c) line += (line.empty() ? "" : " ") + a;
        out.push_back(line);
    }
    return out;
}

ExecutionMetrics::Batch sample_batch() {
    ExecutionMetrics m;
    m.enable({true, false});
    m.record("HardJob", false, 12);    // bucket 0 (< 20 ms)
    m.record("HardJob", false, 280);   // bucket 7 (< 335 ms), Sidekiq's own example
    m.record("HardJob", true, 99999);  // a failure: p and f, no time
    m.record("OnlyFails", true, 5);
    return m.take();
}

}  // namespace

TEST_CASE("metrics: Sidekiq's 26 histogram buckets", "[metrics][sidekiq7]") {
    CHECK(ExecutionMetrics::bucket_of(0) == 0);
    CHECK(ExecutionMetrics::bucket_of(19) == 0);
    CHECK(ExecutionMetrics::bucket_of(20) == 1);  // "ms < 20" is bucket 0; 20 is not
    CHECK(ExecutionMetrics::bucket_of(280) == 7);
    CHECK(ExecutionMetrics::bucket_of(334999) == 24);
    CHECK(ExecutionMetrics::bucket_of(335000) == 25);  // "Slow"
    CHECK(ExecutionMetrics::bucket_of(1LL << 50) == 25);
}

TEST_CASE("metrics: counts per class; failures are not timed; off counts nothing",
          "[metrics][sidekiq7]") {
    const auto batch = sample_batch();
    REQUIRE(batch.size() == 2);
    const auto& hard = batch.at("HardJob");
    CHECK(hard.processed == 3);
    CHECK(hard.failed == 1);
    CHECK(hard.ms == 292);
    CHECK(hard.histogram[0] == 1);
    CHECK(hard.histogram[7] == 1);
    long long timed = 0;
    for (auto n : hard.histogram) timed += n;
    CHECK(timed == 2);
    CHECK(batch.at("OnlyFails").processed == 1);
    CHECK(batch.at("OnlyFails").ms == 0);

    ExecutionMetrics off;
    off.record("HardJob", false, 1);
    CHECK(off.take().empty());
    off.enable({false, true});
    off.record("HardJob", false, 1);
    CHECK(off.take().size() == 1);
    CHECK(off.take().empty());  // take() starts afresh
}

TEST_CASE("metrics: Sidekiq 7.3's keys, fields and expiries", "[metrics][sidekiq7]") {
    const auto cmds =
        joined(ExecutionMetrics::flush_commands(sample_batch(), Keys{}, kAt, {true, false}));
    CHECK(cmds == std::vector<std::string>{
                      "HINCRBY j|20260205|8:3 HardJob|p 3",
                      "HINCRBY j|20260205|8:3 HardJob|f 1",
                      "HINCRBY j|20260205|8:3 HardJob|ms 292",
                      "HINCRBY j|20260205|8:3 OnlyFails|p 1",
                      "HINCRBY j|20260205|8:3 OnlyFails|f 1",
                      "EXPIRE j|20260205|8:3 28800",
                      "BITFIELD HardJob-05-08:3 OVERFLOW SAT INCRBY u16 #0 1 INCRBY u16 #7 1",
                      "EXPIRE HardJob-05-08:3 28800",
                  });
    CHECK(ExecutionMetrics::flush_commands({}, Keys{}, kAt, {true, true}).empty());
    // A key prefix (redis-namespace) goes in front of every key.
    const auto prefixed =
        joined(ExecutionMetrics::flush_commands(sample_batch(), Keys{"ns"}, kAt, {true, false}));
    CHECK(prefixed.front() == "HINCRBY ns:j|20260205|8:3 HardJob|p 3");
    CHECK(prefixed.back() == "EXPIRE ns:HardJob-05-08:3 28800");
}

TEST_CASE(
    "metrics: Sidekiq 8's keys: two-digit year, padded minute, ten-minute rollup, h| "
    "histograms",
    "[metrics][sidekiq8]") {
    // 2026-12-25 13:47:05 UTC: the ten-minute bucket is "13:4"; nothing needs padding.
    const std::time_t late = 1798206425;
    const auto cmds =
        joined(ExecutionMetrics::flush_commands(sample_batch(), Keys{}, late, {false, true}));
    const std::string minute = "j|261225|13:47";
    const std::string tens = "j|261225|13:4";
    const std::string hist = "h|HardJob-25-13:47";
    CHECK(cmds == std::vector<std::string>{
                      "HINCRBY " + minute + " HardJob|p 3",
                      "HINCRBY " + minute + " HardJob|f 1",
                      "HINCRBY " + minute + " HardJob|ms 292",
                      "HINCRBY " + minute + " OnlyFails|p 1",
                      "HINCRBY " + minute + " OnlyFails|f 1",
                      "EXPIRE " + minute + " 28800",
                      "HINCRBY " + tens + " HardJob|p 3",
                      "HINCRBY " + tens + " HardJob|f 1",
                      "HINCRBY " + tens + " HardJob|ms 292",
                      "HINCRBY " + tens + " OnlyFails|p 1",
                      "HINCRBY " + tens + " OnlyFails|f 1",
                      "EXPIRE " + tens + " 259200",
                      "BITFIELD " + hist + " OVERFLOW SAT INCRBY u16 #0 1 INCRBY u16 #7 1",
                      "EXPIRE " + hist + " 28800",
                  });
    // Early in the hour and the day: 8.x pads the minute of the hash ("8:03", bucket "8:0") but
    // not the day, hour or minute of the histogram ("h|C-5-8:3").
    const auto early =
        joined(ExecutionMetrics::flush_commands(sample_batch(), Keys{}, kAt, {false, true}));
    CHECK(early.front() == "HINCRBY j|260205|8:03 HardJob|p 3");
    CHECK(early[6] == "HINCRBY j|260205|8:0 HardJob|p 3");
    CHECK(early[12] == "BITFIELD h|HardJob-5-8:3 OVERFLOW SAT INCRBY u16 #0 1 INCRBY u16 #7 1");
    // Both layouts at once (a cluster of 7 and 8 processes): 7's keys, then 8's.
    const auto both =
        joined(ExecutionMetrics::flush_commands(sample_batch(), Keys{}, kAt, {true, true}));
    CHECK(both.size() == 8 + 14);
    CHECK(both[0] == "HINCRBY j|20260205|8:3 HardJob|p 3");
    CHECK(both[8] == "HINCRBY j|260205|8:03 HardJob|p 3");
}
