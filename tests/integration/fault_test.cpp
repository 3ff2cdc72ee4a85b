// Fault tests [fault]: real redis-server and kiqd processes on loopback, under the faults a
// production deployment meets — Redis going away mid-run (with AOF, so the queue survives), a
// stats flush whose reply is lost after Redis applied it, and a queue full of malformed payloads
// mixed with good ones. Each asserts outcomes (nothing lost, nothing counted twice, the process
// survives), never timings.
#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "kiqd/client.hpp"
#include "server/heartbeat.hpp"
#include "server/process_identity.hpp"
#include "support/job_pushes.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/test_daemon_records.hpp"
#include "support/test_runtime.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using kiqd::test::counter;
using kiqd::test::KiqdProcess;
using kiqd::test::llen;
using kiqd::test::RedisServer;
using kiqd::test::wait_until;
using kiqd::test::zcard;

TEST_CASE("harness: a redis-server that cannot start is reported with its exit status",
          "[fault][harness]") {
    // An option redis-server refuses: it exits at once. The fixture says so instead of waiting
    // out its deadline, and reaps the child (no redis-server is left behind).
    try {
        RedisServer refused({"--no-such-option", "yes"});
        FAIL("redis-server started with an unknown option");
    } catch (const std::runtime_error& e) {
        CHECK_THAT(e.what(), Catch::Contains("exited with status 1"));
    }
    CHECK(::waitpid(-1, nullptr, WNOHANG) <= 0);  // no unreaped child
}

TEST_CASE("fault: a stats flush sent twice counts once", "[fault][heartbeat]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    Keys keys;
    const std::string date = "2026-01-02";
    conn.command(stats_flush_command(keys, "host:1:abc", 1, 5, 2, date));
    conn.command(stats_flush_command(keys, "host:1:abc", 1, 5, 2, date));  // the retry
    CHECK(counter(conn, "stat:processed") == 5);
    CHECK(counter(conn, "stat:failed") == 2);
    CHECK(counter(conn, "stat:processed:" + date) == 5);
    CHECK(conn.command({"TTL", "stat:processed:" + date}).integer() > 0);
    conn.command(stats_flush_command(keys, "host:1:abc", 2, 1, 0, date));
    conn.command(stats_flush_command(keys, "host:1:abc", 1, 5, 2, date));  // late duplicate
    CHECK(counter(conn, "stat:processed") == 6);
    // Sequence numbers are per process: another identity starts at 1 again.
    conn.command(stats_flush_command(keys, "host:2:def", 1, 10, 0, date));
    CHECK(counter(conn, "stat:processed") == 16);
    CHECK(conn.command({"TTL", "host:1:abc:flushed"}).integer() > 0);
}

TEST_CASE("fault: a flush applied by Redis whose reply is lost is not counted twice",
          "[fault][heartbeat]") {
    // DEBUG SLEEP blocks the server; the heartbeat's short socket timeout then fires after its
    // MULTI/EVAL/EXEC was sent, the client drops the connection, and Redis applies the
    // transaction once it wakes up: applied, reply lost — the case a plain INCRBY retry
    // would count twice.
    RedisServer server({"--enable-debug-command", "yes"});
    kiqd::test::TestRuntime t(server);
    t.rt.connection_options.socket_timeout = std::chrono::milliseconds(300);
    const auto me = ProcessIdentity::create();
    Heartbeat heartbeat(t.rt, me, "{}");
    auto conn = server.connect();
    // Connected before the server blocks: the connection's setup (its PING) must not be what
    // times out, the transaction must be.
    heartbeat.beat();
    REQUIRE(counter(conn, "stat:processed") == 0);
    t.work.processed = 3;
    t.work.failed = 1;

    std::thread blocker([&] {
        auto c = server.connect();
        c.command({"DEBUG", "SLEEP", "2"});
    });
    auto probe_options = server.options();
    probe_options.socket_timeout = std::chrono::milliseconds(50);
    // The server is blocked once a PING no longer gets an answer.
    REQUIRE(wait_until([&] {
        try {
            redis::Connection probe(probe_options);
            probe.command({"PING"});
            return false;
        } catch (const redis::Error&) {
            return true;
        }
    }));
    heartbeat.beat();  // times out: the batch {processed 3, failed 1} stays pending
    CHECK(t.work.processed.load() == 0);
    blocker.join();
    // Redis woke up and applied the transaction nobody was waiting for any more.
    REQUIRE(wait_until([&] { return counter(conn, "stat:processed") == 3; }));
    CHECK(counter(conn, "stat:failed") == 1);

    t.work.processed += 2;  // jobs finished meanwhile
    heartbeat.beat();       // retries the pending batch: a no-op in Redis
    CHECK(counter(conn, "stat:processed") == 3);
    CHECK(counter(conn, "stat:failed") == 1);
    heartbeat.beat();  // the next batch carries the 2
    CHECK(counter(conn, "stat:processed") == 5);
    t.work.processed += 4;
    heartbeat.clear();  // the shutdown flush
    CHECK(counter(conn, "stat:processed") == 9);
    CHECK(counter(conn, "stat:failed") == 1);
}

TEST_CASE(
    "fault: Redis stopped for 5 s in the middle of 5,000 jobs (AOF): none lost or "
    "counted twice",
    "[fault][outage]") {
    RedisServer server({"--appendonly", "yes"});
    auto conn = server.connect();
    constexpr int kJobs = 5000;
    kiqd::test::push_copies(conn, {{"class", "Kiqd::Sleep"}, {"args", {0.005}}, {"retry", true}},
                            kJobs);
    REQUIRE(llen(conn, "queue:default") == kJobs);
    // Reliable fetch: with BasicFetch (BRPOP, as in Sidekiq) a job popped in the event-loop
    // iteration in which redis-server shuts down is gone — the pop is in the AOF, the reply never
    // leaves the server (seen here: 1–2 of 5,000 jobs in 2 of 3 runs). Only reliable fetch can
    // promise that none is lost.
    KiqdProcess kiqd(KIQD_BINARY, kiqd::test::kiqd_config(server,
                                                          "concurrency: 5\nqueues: [default]\n"
                                                          "fetch: reliable\n"
                                                          "logging: {level: warn}\n"));
    const pid_t pid = kiqd.pid();
    // In the middle of the run: at least 1,000 done, at least 1,000 still queued.
    REQUIRE(
        wait_until([&] { return llen(conn, "queue:default") <= 4000; }, std::chrono::seconds(60)));
    server.stop();
    // The outage itself is the point of the test: five seconds without Redis.
    std::this_thread::sleep_for(std::chrono::seconds(5));
    CHECK(kiqd.running());
    server.start();
    auto after = server.connect();
    CHECK(llen(after, "queue:default") > 0);  // AOF kept the queue
    // Jobs in this process's reliable-fetch working lists: fetched, not yet acknowledged.
    auto in_working_lists = [&] {
        long long n = 0;
        auto lists = after.command({"SMEMBERS", "kiqd:reliable:working"});
        for (size_t i = 0; i < lists.size(); ++i) n += llen(after, std::string(lists[i].str()));
        return n;
    };
    // Every job runs, and the heartbeat's flushes (not only the one at exit) count each run
    // once: nothing lost, nothing counted twice. A job whose RPOPLPUSH reply was lost in the
    // shutdown sits in this live process's working list until OrphanRecovery returns it as
    // stranded (after kStrandedAfter), so the wait allows for that.
    REQUIRE(wait_until(
        [&] {
            return llen(after, "queue:default") == 0 && in_working_lists() == 0 &&
                   counter(after, "stat:processed") >= kJobs;
        },
        std::chrono::seconds(120)));
    CHECK(kiqd.running());
    CHECK(kiqd.pid() == pid);
    CHECK(counter(after, "stat:processed") == kJobs);
    CHECK(kiqd.stop() == 0);
    CHECK(counter(after, "stat:processed") + in_working_lists() + llen(after, "queue:default") ==
          kJobs);
    CHECK(counter(after, "stat:failed") == 0);
    CHECK(zcard(after, "retry") == 0);
    CHECK(zcard(after, "dead") == 0);
    // The clean stop unregistered the process's working lists (the fetch script was reloaded
    // after the restart emptied Redis's script cache, or nothing would have run).
    CHECK(after.command({"SCARD", "kiqd:reliable:working"}).integer() == 0);
    CHECK_THAT(kiqd.output(), Catch::Contains("Redis is unreachable"));
    CHECK_THAT(kiqd.output(), Catch::Contains("Redis is back after"));
}

TEST_CASE(
    "fault: 1,000 malformed payloads among 10,000 good ones: every good job runs, every "
    "bad one is dead with a reason",
    "[fault][payloads]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    constexpr int kGood = 10000, kBad = 1000;
    constexpr size_t kMaxPayload = 4096;
    std::vector<std::string> raws;
    for (int i = 0; i < kGood; ++i)
        raws.push_back(nlohmann::json{
            {"class", "Test::Record"},
            {"args", {"n" + std::to_string(i)}},
            {"jid", "good-" + std::to_string(i)},
            {"queue", "default"},
            {"retry",
             true}}.dump());
    const std::string deep = std::string(1000, '[') + std::string(1000, ']');
    for (int i = 0; i < kBad; ++i) {
        const std::string n = std::to_string(i);
        const std::string jid = "\"jid\":\"bad-" + n + "\"";
        switch (i % 10) {
            case 0:
                raws.push_back("not json " + n);
                break;
            case 1:
                raws.push_back("[" + n + ",\"Test::Record\"]");
                break;
            case 2:
                raws.push_back("{\"args\":[" + n + "]," + jid + "}");
                break;
            case 3:
                raws.push_back("{\"class\":" + n + ",\"args\":[]," + jid + "}");
                break;
            case 4:
                raws.push_back("{\"class\":\"\",\"args\":[]," + jid + "}");
                break;
            case 5:
                raws.push_back("{\"class\":\"Test::Record\",\"args\":[\"\xff\xfe" + n + "\"]," +
                               jid + "}");
                break;
            case 6:
                raws.push_back("{\"class\":\"Test::Record\",\"args\":" + deep + "," + jid + "}");
                break;
            case 7:
                raws.push_back("{\"class\":\"Test::Record\",\"args\":[\"" +
                               std::string(kMaxPayload, 'x') + "\"]," + jid + "}");
                break;
            case 8:
                raws.push_back("{\"class\":\"Test::Record\",\"args\":{}," + jid + "}");
                break;
            default:
                raws.push_back("{\"class\":\"Test::Record\",\"args\":[" + n);
                break;
        }
    }
    std::mt19937 rng(20261122);
    std::shuffle(raws.begin(), raws.end(), rng);
    kiqd::test::push_raw(conn, "default", raws);

    KiqdProcess kiqd(KIQD_TEST_DAEMON,
                     kiqd::test::kiqd_config(server,
                                             "concurrency: 10\nqueues: [default]\n"
                                             "logging: {level: error}\n"
                                             "max_payload_bytes: " +
                                                 std::to_string(kMaxPayload) + "\n"));
    const pid_t pid = kiqd.pid();
    REQUIRE(wait_until(
        [&] { return kiqd::test::ran_count(conn) >= kGood && zcard(conn, "dead") >= kBad; },
        std::chrono::seconds(240)));
    CHECK(kiqd.running());
    CHECK(kiqd.pid() == pid);
    CHECK(llen(conn, "queue:default") == 0);

    const auto ran = kiqd::test::ran_records(conn);
    const auto jids = kiqd::test::jids_of(ran);
    CHECK(ran.size() == static_cast<size_t>(kGood));  // each good job ran exactly once
    CHECK(jids.size() == static_cast<size_t>(kGood));
    CHECK(*jids.begin() == "good-0");

    auto dead = kiqd::test::parse_each(kiqd::test::zrange(conn, "dead"));
    REQUIRE(dead.size() == static_cast<size_t>(kBad));
    std::map<std::string, int> classes;
    for (auto& entry : dead) {
        REQUIRE(entry["error_class"].is_string());
        REQUIRE(entry["error_message"].is_string());
        CHECK_FALSE(entry["error_message"].get<std::string>().empty());
        CHECK(entry["queue"] == "default");
        classes[entry["error_class"].get<std::string>()]++;
    }
    CHECK(classes["Kiqd::PayloadTooLarge"] == kBad / 10);
    CHECK(classes["JSON::ParserError"] == 3 * kBad / 10);  // not JSON, truncated, bad UTF-8
    CHECK(classes["Kiqd::InvalidJob"] == 6 * kBad / 10);
    CHECK(zcard(conn, "retry") == 0);
    CHECK(kiqd.stop() == 0);
}
