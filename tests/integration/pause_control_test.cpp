// Pause control against a real Redis with real kiqd processes: a worker paused across two
// processes (its jobs parked, others running, then each resumed job run exactly once), the
// parked order kept exactly (one thread), kill -9 of the process doing a resume, a queue paused
// across two processes, and the redis_flag strategy — driven through the `kiqd pause/resume/
// paused` commands an operator uses.
#include "middleware/pause/pause_control.hpp"

#include <signal.h>

#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "kiqd/client.hpp"
#include "kiqd_cli.hpp"
#include "support/job_pushes.hpp"
#include "support/kiqd_fleet.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/test_daemon_records.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using kiqd::test::kiqd_cli;
using kiqd::test::KiqdFleet;
using kiqd::test::KiqdProcess;
using kiqd::test::llen;
using kiqd::test::lrange;
using kiqd::test::ran_count;
using kiqd::test::RedisServer;
using kiqd::test::wait_until;
using kiqd::test::zcard;
using kiqd::test::zrange;

namespace {

constexpr std::chrono::seconds kLong{60};

// Pushes `n` jobs of `job_class` to `queue` with args [0, i] (no sleep, sequence number i).
void push_jobs(redis::Connection& conn, const std::string& job_class, const std::string& queue,
               int n, int first = 0) {
    kiqd::test::push_jobs(conn, n, [&](int i) {
        return nlohmann::ordered_json{
            {"class", job_class}, {"queue", queue}, {"args", {0, first + i}}};
    });
}

struct Ran {
    std::map<std::string, int> by_class;  // class → runs
    std::map<std::string, int> by_jid;    // jid → runs
    std::map<std::string, int> by_queue;  // queue → runs
    std::vector<int> record_sequence;     // Test::Record's args[1], in the order recorded
};

Ran ran(redis::Connection& conn) {
    Ran r;
    for (auto& j : kiqd::test::ran_records(conn)) {
        const auto cls = j["class"].get<std::string>();
        ++r.by_class[cls];
        ++r.by_jid[j["jid"].get<std::string>()];
        ++r.by_queue[j["queue"].get<std::string>()];
        if (cls == "Test::Record") r.record_sequence.push_back(j["args"][1].get<int>());
    }
    return r;
}

const std::string kParked = "sidekiq:pause_control:paused_jobs:zset:{test/record}";
const std::string kScore = "sidekiq:pause_control:paused_jobs:score:{test/record}";

// Waits until every process has logged that it sees `what` paused.
bool all_see(const KiqdFleet& fleet, const std::string& what) {
    return fleet.wait_for_output(what, std::chrono::seconds(20));
}

}  // namespace

TEST_CASE("a paused worker's jobs are parked across two processes, then each runs once",
          "[pause][daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    const std::string yaml = kiqd::test::kiqd_config(
        server,
        "concurrency: 5\nqueues: [default, other]\n"
        "pause_control: {refresh_interval: 0.2, resume_interval: 0.3, batch_size: 300}\n");
    KiqdFleet fleet(KIQD_TEST_DAEMON, yaml, 2);
    // Other work is running while the pause arrives.
    push_jobs(conn, "Test::Other", "other", 100);
    REQUIRE(wait_until([&] { return ran_count(conn) == 100; }, kLong));

    auto [code, out] = kiqd_cli(server, {"pause", "worker", "Test::Record"});
    REQUIRE(code == 0);
    CHECK_THAT(out, Catch::Contains("worker Test::Record is now paused"));
    REQUIRE(all_see(fleet, "paused workers: Test::Record;"));

    push_jobs(conn, "Test::Record", "default", 2000);
    push_jobs(conn, "Test::Other", "other", 200, 100);
    REQUIRE(wait_until([&] { return zcard(conn, kParked) == 2000; }, kLong));
    REQUIRE(wait_until([&] { return ran_count(conn) == 300; }, kLong));
    {
        auto r = ran(conn);
        CHECK(r.by_class["Test::Other"] == 300);
        CHECK(r.by_class["Test::Record"] == 0);  // none ran: every one was parked
    }
    CHECK(llen(conn, "queue:default") == 0);
    // Parked jobs count as neither processed nor failed.
    REQUIRE(wait_until([&] { return kiqd::test::counter(conn, "stat:processed") == 300; }));
    auto [pcode, paused] = kiqd_cli(server, {"paused"});
    CHECK(pcode == 0);
    CHECK_THAT(paused, Catch::Contains("Test::Record") && Catch::Contains("2000 parked"));

    auto [rcode, rout] = kiqd_cli(server, {"resume", "worker", "Test::Record"});
    REQUIRE(rcode == 0);
    CHECK_THAT(rout, Catch::Contains("is now resumed"));
    REQUIRE(wait_until([&] { return ran_count(conn) == 2300; }, kLong));
    auto r = ran(conn);
    CHECK(r.by_class["Test::Record"] == 2000);
    CHECK(r.by_jid.size() == 2300);  // each job exactly once
    for (const auto& [jid, n] : r.by_jid) REQUIRE(n == 1);
    // The class's keys are gone once its last batch moved.
    CHECK(zcard(conn, kParked) == 0);
    CHECK(conn.command({"EXISTS", kScore}).integer() == 0);
    CHECK(conn.command({"HLEN", "kiqd:pause:parked"}).integer() == 0);
    auto [ecode, empty] = kiqd_cli(server, {"paused"});
    // After the line naming the Redis read.
    CHECK(empty == "Redis 127.0.0.1:" + std::to_string(server.port()) +
                       "/0 (REDIS_URL)\nnothing is paused\n");
    for (int status : fleet.stop()) CHECK(status == 0);
}

TEST_CASE("parked jobs keep their order and resume in it, batch after batch", "[pause][daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    // Paused before the process starts: it must not run a single job of the class.
    REQUIRE(kiqd_cli(server, {"pause", "worker", "Test::Record"}).first == 0);
    push_jobs(conn, "Test::Record", "default", 250);
    KiqdProcess kiqd(KIQD_TEST_DAEMON,
                     kiqd::test::kiqd_config(server,
                                             "concurrency: 1\nqueues: [default]\n"
                                             "pause_control: {refresh_interval: 0.2, "
                                             "resume_interval: 0.2, batch_size: 60}\n"));
    REQUIRE(wait_until([&] { return zcard(conn, kParked) == 250; }, kLong));
    CHECK(ran_count(conn) == 0);
    // In the ZSET in enqueue order (one thread: fetch order = enqueue order).
    int expected = 0;
    for (const auto& m : zrange(conn, kParked))
        CHECK(nlohmann::json::parse(m)["args"][1].get<int>() == expected++);

    REQUIRE(kiqd_cli(server, {"resume", "worker", "Test::Record"}).first == 0);
    REQUIRE(wait_until([&] { return ran_count(conn) == 250; }, kLong));
    auto r = ran(conn);
    std::vector<int> in_order(250);
    for (int i = 0; i < 250; ++i) in_order[static_cast<size_t>(i)] = i;
    CHECK(r.record_sequence == in_order);
    CHECK_THAT(kiqd.output(), Catch::Contains("resumed 60 parked job(s) of Test::Record"));
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("kill -9 of the process doing a resume loses and duplicates nothing", "[pause][daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    // 2000 parked jobs of a class nobody pauses any more.
    const Keys keys;
    ParkedJobs parked(keys, Compat::v6);
    Client client(keys, Compat::v6);
    std::set<std::string> jids;
    for (int i = 0; i < 2000; ++i) {
        auto prepared = client.prepare({{"class", "Test::Record"}, {"args", {0, i}}});
        jids.insert(prepared.jid);
        parked.park(conn, "Test::Record", prepared.payload, "manual");
    }
    REQUIRE(zcard(conn, kParked) == 2000);
    // The resumer serves another queue, so the jobs it moves stay in queue:default for us to
    // count; small batches make it take several rounds.
    KiqdProcess resumer(KIQD_TEST_DAEMON,
                        kiqd::test::kiqd_config(server,
                                                "concurrency: 2\nqueues: [elsewhere]\n"
                                                "pause_control: {refresh_interval: 0.1, "
                                                "resume_interval: 0.1, batch_size: 50}\n"));
    REQUIRE(wait_until(
        [&] {
            const auto left = zcard(conn, kParked);
            return left > 0 && left < 2000;
        },
        kLong));
    resumer.signal(SIGKILL);
    resumer.wait_exit();
    // Every job is in exactly one place: parked or queued.
    const auto left = zcard(conn, kParked);
    const auto queued = llen(conn, "queue:default");
    INFO("left parked " << left << ", queued " << queued);
    CHECK(left > 0);
    CHECK(left + queued == 2000);
    std::set<std::string> seen;
    for (const auto& m : zrange(conn, kParked))
        seen.insert(nlohmann::json::parse(m)["jid"].get<std::string>());
    for (const auto& m : lrange(conn, "queue:default"))
        seen.insert(nlohmann::json::parse(m)["jid"].get<std::string>());
    CHECK(seen == jids);

    // A new process takes the resume over (once the dead one's lock expired) and runs them all.
    KiqdProcess successor(KIQD_TEST_DAEMON,
                          kiqd::test::kiqd_config(server,
                                                  "concurrency: 5\nqueues: [default]\n"
                                                  "pause_control: {refresh_interval: 0.1, "
                                                  "resume_interval: 0.1, batch_size: 50}\n"));
    REQUIRE(wait_until([&] { return ran_count(conn) == 2000; }, kLong));
    auto r = ran(conn);
    CHECK(r.by_jid.size() == 2000);
    for (const auto& [jid, n] : r.by_jid) REQUIRE(n == 1);
    CHECK(successor.stop() == 0);
}

TEST_CASE("a paused queue is not fetched from by any process; resuming drains it",
          "[pause][daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    const std::string yaml =
        kiqd::test::kiqd_config(server,
                                "concurrency: 3\nqueues: [[default, 1], [low, 1]]\n"
                                "pause_control: {refresh_interval: 0.2}\n");
    KiqdFleet fleet(KIQD_TEST_DAEMON, yaml, 2);
    REQUIRE(kiqd_cli(server, {"pause", "queue", "low"}).first == 0);
    REQUIRE(all_see(fleet, "paused queues: low"));

    push_jobs(conn, "Test::Record", "low", 100);
    push_jobs(conn, "Test::Other", "default", 100);
    REQUIRE(wait_until([&] { return ran_count(conn) == 100; }, kLong));
    // A fetch already blocked on `low` when the pause came puts its job back where it was.
    REQUIRE(wait_until([&] { return llen(conn, "queue:low") == 100; }));
    auto r = ran(conn);
    CHECK(r.by_queue["low"] == 0);
    CHECK(r.by_queue["default"] == 100);
    // Untouched and in order: the oldest (sequence 0) still at the popping end. Only the jobs
    // put back by fetches that were already blocked (at most one per thread: 2 × 3) may have
    // swapped places among themselves at the head.
    const auto low = lrange(conn, "queue:low");
    REQUIRE(low.size() == 100);
    constexpr size_t kThreads = 6;
    std::set<size_t> head;
    for (size_t i = 0; i < low.size(); ++i) {
        const auto seq = nlohmann::json::parse(low[low.size() - 1 - i])["args"][1].get<size_t>();
        if (i < kThreads)
            head.insert(seq);
        else
            CHECK(seq == i);
    }
    CHECK(head == std::set<size_t>{0, 1, 2, 3, 4, 5});
    auto [pcode, paused] = kiqd_cli(server, {"paused", "--json"});
    auto report = nlohmann::json::parse(paused);
    CHECK(report["queues"] == nlohmann::json::parse(R"([{"name":"low","size":100}])"));

    REQUIRE(kiqd_cli(server, {"resume", "queue", "low"}).first == 0);
    REQUIRE(wait_until([&] { return ran_count(conn) == 200; }, kLong));
    r = ran(conn);
    CHECK(r.by_queue["low"] == 100);
    CHECK(r.by_jid.size() == 200);
    for (int status : fleet.stop()) CHECK(status == 0);
}

TEST_CASE("redis_flag strategy: parked while the flag is set, resumed when it is cleared",
          "[pause][daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    conn.command({"SET", "maintenance:search", "1"});
    KiqdProcess kiqd(
        KIQD_TEST_DAEMON,
        kiqd::test::kiqd_config(server,
                                "concurrency: 2\nqueues: [default]\n"
                                "pause_control: {refresh_interval: 0.1, resume_interval: 0.2}\n"
                                "handlers:\n  Test::Record:\n    pause_control: "
                                "{strategy: redis_flag, key: \"maintenance:search\"}\n"));
    push_jobs(conn, "Test::Record", "default", 20);
    push_jobs(conn, "Test::Other", "default", 5);
    REQUIRE(wait_until([&] { return zcard(conn, kParked) == 20 && ran_count(conn) == 5; }, kLong));
    CHECK(std::string(conn.command({"HGET", "kiqd:pause:parked", "Test::Record"}).str()) ==
          "redis_flag:maintenance:search");
    auto [code, out] = kiqd_cli(server, {"paused"});
    CHECK_THAT(out,
               Catch::Contains("redis_flag:maintenance:search") && Catch::Contains("20 parked"));
    // "0" counts as cleared, as does a missing key.
    conn.command({"SET", "maintenance:search", "0"});
    REQUIRE(wait_until([&] { return ran_count(conn) == 25; }, kLong));
    CHECK(ran(conn).by_class["Test::Record"] == 20);
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("kiqd pause/resume: usage errors and idempotent answers", "[pause]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto [bad, bad_out] = kiqd_cli(server, {"pause", "class", "X"});
    CHECK(bad != 0);
    CHECK_THAT(bad_out, Catch::Contains("kind"));
    CHECK(kiqd_cli(server, {"pause", "worker", "A"}).first == 0);
    auto [again, again_out] = kiqd_cli(server, {"pause", "worker", "A"});
    CHECK(again == 0);
    CHECK_THAT(again_out, Catch::Contains("was already paused"));
    auto [jcode, json] = kiqd_cli(server, {"paused", "--json"});
    CHECK(nlohmann::json::parse(json)["workers"] ==
          nlohmann::json::parse(R"([{"class":"A","paused":true,"parked":0,"strategy":""}])"));
    CHECK(kiqd_cli(server, {"resume", "worker", "A"}).first == 0);
    auto conn = server.connect();
    CHECK(conn.command({"SCARD", "kiqd:pause:workers"}).integer() == 0);
}
