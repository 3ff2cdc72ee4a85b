// Acknowledgements under batched reliable fetch against a real Redis and real kiqd processes: a
// finished job leaves the working list soon after it ends, not at the next refill, so that a
// long job after short ones, a stall past liveness_ttl or a kill -9 reruns at most the jobs that
// were running (at most one per thread), not a batch's worth of finished ones.
#include <signal.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "support/job_pushes.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/test_daemon_records.hpp"
#include "support/wait_until.hpp"

using kiqd::test::KiqdProcess;
using kiqd::test::llen;
using kiqd::test::lrange;
using kiqd::test::only_member;
using kiqd::test::ran_count;
using kiqd::test::RedisServer;
using kiqd::test::wait_until;
using list_of = std::vector<std::string>;

namespace {

std::string ack_job(const std::string& klass, const std::string& jid, nlohmann::json args) {
    return nlohmann::json{
        {"class", klass}, {"args", std::move(args)}, {"jid", jid},          {"queue", "default"},
        {"retry", 3},     {"created_at", 1.7e9},     {"enqueued_at", 1.7e9}}
        .dump();
}

bool none_contains(const std::vector<std::string>& payloads, const std::string& needle) {
    for (const auto& p : payloads)
        if (p.find(needle) != std::string::npos) return false;
    return true;
}

// How many jids have more than one recorded run.
size_t jids_run_twice(kiqd::redis::Connection& conn) {
    std::map<std::string, int> runs;
    for (const auto& r : kiqd::test::ran_records(conn)) ++runs[r["jid"].get<std::string>()];
    size_t twice = 0;
    for (const auto& [jid, n] : runs) twice += n > 1;
    return twice;
}

}  // namespace

TEST_CASE(
    "batched reliable fetch daemon: finished jobs are acknowledged while a long job runs, not "
    "at the next refill",
    "[batch][reliable][daemon][ack]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    // One thread, one refill of 50: ten short jobs, then one that runs until the test opens its
    // gate, then more. Nothing refills while the gated job runs (the buffer is not low).
    std::vector<std::string> jobs;
    for (int i = 0; i < 10; ++i)
        jobs.push_back(
            ack_job("Test::Record", "short" + std::to_string(i), nlohmann::json::array()));
    jobs.push_back(ack_job("Test::Gated::WhileExecuting", "long", {"k", "g1", "pass"}));
    for (int i = 0; i < 30; ++i)
        jobs.push_back(
            ack_job("Test::Record", "after" + std::to_string(i), nlohmann::json::array()));
    kiqd::test::push_raw(conn, "default", jobs);
    KiqdProcess kiqd(KIQD_TEST_DAEMON,
                     kiqd::test::kiqd_config(server,
                                             "concurrency: 1\nqueues: [default]\nfetch: reliable\n"
                                             "reliable_fetch: {batch_size: 50}\n"));
    REQUIRE(wait_until([&] { return lrange(conn, "kiqd-test:started") == list_of{"long"}; },
                       std::chrono::seconds(30)));
    CHECK(ran_count(conn) == 10);
    const auto working = only_member(conn, "kiqd:reliable:working");
    REQUIRE(working);
    // The ten finished jobs leave the working list while the long one still runs, not with the
    // refill after it.
    CHECK(wait_until([&] { return none_contains(lrange(conn, *working), "\"short"); }));
    CHECK(lrange(conn, "kiqd-test:done").empty());  // still running
    CHECK_FALSE(none_contains(lrange(conn, *working), "\"long\""));
    conn.command({"SET", "kiqd-test:gate:g1", "1"});
    REQUIRE(wait_until([&] { return ran_count(conn) == 40 && llen(conn, *working) == 0; },
                       std::chrono::seconds(30)));
    CHECK(lrange(conn, "kiqd-test:done") == list_of{"long"});
    CHECK(kiqd.stop() == 0);
}

TEST_CASE(
    "batched reliable fetch daemon: a process stopped past liveness_ttl, or killed, with 100 ms "
    "jobs and a batch of 50 reruns at most its running jobs",
    "[batch][reliable][daemon][ack][hardening]") {
    const int how = GENERATE(SIGSTOP, SIGKILL);
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    constexpr int kJobs = 200, kConcurrency = 2;
    std::vector<std::string> jobs;
    for (int i = 0; i < kJobs; ++i)
        jobs.push_back(
            ack_job("Test::Record", "j" + std::to_string(i), nlohmann::json::array({0.1})));
    kiqd::test::push_raw(conn, "default", jobs);
    const std::string yaml = kiqd::test::kiqd_config(
        server,
        "concurrency: " + std::to_string(kConcurrency) +
            "\nqueues: [default]\nfetch: reliable\n"
            "reliable_fetch: {batch_size: 50, liveness_ttl: 3, orphan_check_interval: 1}\n");
    KiqdProcess a(KIQD_TEST_DAEMON, yaml);
    // Well into its first batch: a refill of 50 lasts 2.5 s at 100 ms and two threads, so
    // acknowledgements held until the next refill would be about 20 finished jobs.
    REQUIRE(wait_until([&] { return ran_count(conn) >= 20; }, std::chrono::seconds(30)));
    a.signal(how);
    const auto working = only_member(conn, "kiqd:reliable:working");
    REQUIRE(working);
    const long long held = llen(conn, *working);
    KiqdProcess b(KIQD_TEST_DAEMON, yaml);
    REQUIRE(b.wait_for_output("recovering " + *working, std::chrono::seconds(30)));
    if (how == SIGSTOP) {
        REQUIRE(wait_until([&] { return llen(conn, *working) == 0; }));
        a.signal(SIGCONT);
    }
    REQUIRE(wait_until(
        [&] {
            return kiqd::test::jids_of(kiqd::test::ran_records(conn)).size() == kJobs &&
                   llen(conn, "queue:default") == 0;
        },
        std::chrono::seconds(90)));
    if (how == SIGSTOP) CHECK(a.stop() == 0);
    CHECK(b.stop() == 0);
    const size_t twice = jids_run_twice(conn);
    std::printf(
        "%s with 100 ms jobs, batch 50, concurrency %d: %lld ack_job(s) in its working list, "
        "%zu jid(s) ran twice\n",
        how == SIGSTOP ? "stall past liveness_ttl" : "kill -9", kConcurrency, held, twice);
    CHECK(twice <= static_cast<size_t>(kConcurrency));
}
