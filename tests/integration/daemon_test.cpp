// The real kiqd binaries as child processes: configuration errors, weighted shares, signals,
// shutdown requeue, the heartbeat contract, and Redis outages.
#include <signal.h>

#include <catch2/catch.hpp>
#include <map>

#include "kiqd/client.hpp"
#include "support/job_pushes.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/test_daemon_records.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using kiqd::test::kiqd_config;
using kiqd::test::KiqdProcess;
using kiqd::test::llen;
using kiqd::test::ran_count;
using kiqd::test::RedisServer;
using kiqd::test::wait_until;

namespace {

// The identity of the only kiqd process registered in `processes`.
std::string wait_for_identity(redis::Connection& c) {
    std::string id;
    wait_until([&] {
        const auto member = kiqd::test::only_member(c, "processes");
        if (member) id = *member;
        return member.has_value();
    });
    return id;
}

}  // namespace

TEST_CASE("daemon: a bad config stops startup with exit 78 naming the key", "[daemon]") {
    // Redis URL points at a closed port: the error must come before any Redis access.
    const std::string redis = "redis: {url: redis://127.0.0.1:1/0}\n";
    struct Case {
        std::string yaml, expected;
    };
    for (const auto& c : std::vector<Case>{
             {redis + "queues: [a]\nconcurency: 3\n", "concurency (line 3): unknown key"},
             {redis + "queues:\n  - [a, 0]\n", "weight must be at least 1"},
             {redis + "queues: []\n", "queues (line 2): is empty"},
             {redis + "concurrency: 4\n", "no queues configured"},
             {redis + "queues: [a]\ntimeout: soon\n", "timeout (line 3): must be a number"},
         }) {
        KiqdProcess p(KIQD_BINARY, c.yaml);
        CHECK(p.wait_exit() == 78);
        CHECK_THAT(p.output(), Catch::Contains(c.expected));
    }
    auto [code, out] = kiqd::test::run_command({KIQD_BINARY, "-C", "/nonexistent.yml"});
    CHECK(code == 78);
    CHECK_THAT(out, Catch::Contains("cannot read '/nonexistent.yml'"));
    auto [qcode, qout] = kiqd::test::run_command({KIQD_BINARY, "-q", "x,0"});
    CHECK(qcode == 78);
    auto [ucode, uout] = kiqd::test::run_command({KIQD_BINARY, "--no-such-flag"});
    CHECK(ucode == 64);
}

TEST_CASE("daemon: check-config and --version", "[daemon]") {
    auto [code, out] =
        kiqd::test::check_config(KIQD_BINARY, "queues: [[critical, 3], default]\nconcurrency: 4\n");
    CHECK(code == 0);
    CHECK_THAT(out, Catch::Contains("is valid: concurrency=4, 2 queue(s)"));
    // The example config shipped in config/ validates as it stands.
    auto [ecode, eout] = kiqd::test::run_command(
        {KIQD_BINARY, "check-config", "-C", KIQD_SOURCE_DIR "/config/kiqd.yml"});
    CHECK(ecode == 0);
    CHECK_THAT(eout, Catch::Contains("is valid"));
    auto [vcode, vout] = kiqd::test::run_command({KIQD_BINARY, "--version"});
    CHECK(vcode == 0);
    CHECK_THAT(vout, Catch::StartsWith("kiqd "));
}

TEST_CASE("daemon: weighted 6/3/1 shares over 10,000 jobs are 60/30/10 within 2 points",
          "[daemon][fetch][reliable]") {
    // The same shares with Sidekiq's BasicFetch and with reliable fetch.
    const std::string fetch = GENERATE("basic", "reliable");
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    for (const std::string q : {"critical", "default", "low"})
        kiqd::test::push_copies(
            conn, {{"class", "Test::Record"}, {"queue", q}, {"args", nlohmann::json::array()}},
            10000);
    KiqdProcess kiqd(KIQD_TEST_DAEMON, kiqd_config(server,
                                                   "concurrency: 5\nlogging: {level: warn}\n"
                                                   "queues:\n  - [critical, 6]\n  - [default, 3]\n"
                                                   "  - [low, 1]\nfetch: " +
                                                       fetch + "\n"));
    REQUIRE(wait_until([&] { return ran_count(conn) >= 10000; }, std::chrono::seconds(120)));
    CHECK(kiqd.stop() == 0);
    auto ran = conn.command({"LRANGE", kiqd::test::kRanKey, "0", "9999"});
    std::map<std::string, int> shares;
    for (size_t i = 0; i < ran.size(); ++i)
        shares[nlohmann::json::parse(ran[i].str())["queue"].get<std::string>()]++;
    INFO("fetch=" << fetch << " critical=" << shares["critical"] << " default=" << shares["default"]
                  << " low=" << shares["low"]);
    CHECK(std::abs(shares["critical"] / 100.0 - 60) <= 2);
    CHECK(std::abs(shares["default"] / 100.0 - 30) <= 2);
    CHECK(std::abs(shares["low"] / 100.0 - 10) <= 2);
}

TEST_CASE("daemon: heartbeat contract, quiet on SIGTSTP, requeue on SIGTERM", "[daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    Client client(Keys{}, Compat::v6);
    client.push(conn, {{"class", "Kiqd::Sleep"}, {"args", {60}}, {"queue", "slow"}});
    const std::string original(conn.command({"LINDEX", "queue:slow", "0"}).str());
    KiqdProcess kiqd(KIQD_BINARY, kiqd_config(server,
                                              "concurrency: 3\ntimeout: 1\ntag: billing\n"
                                              "labels: [canary]\nqueues: [slow, default]\n"));
    const std::string id = wait_for_identity(conn);
    REQUIRE_THAT(id, Catch::Contains(":" + std::to_string(kiqd.pid()) + ":"));

    // The process hash, as ProcessSet reads it.
    REQUIRE(wait_until([&] { return conn.command({"HGET", id, "busy"}).optional_str() == "1"; }));
    auto info = nlohmann::json::parse(conn.command({"HGET", id, "info"}).str());
    CHECK(info["concurrency"] == 3);
    CHECK(info["queues"] == nlohmann::json::array({"slow", "default"}));
    CHECK(info["tag"] == "billing");
    CHECK(info["labels"] == nlohmann::json::array({"canary"}));
    CHECK(info["pid"] == kiqd.pid());
    CHECK(info["identity"] == id);
    CHECK(info["started_at"].is_number_float());
    CHECK(conn.command({"HGET", id, "quiet"}).str() == "false");
    CHECK(std::stoll(std::string(conn.command({"HGET", id, "rss"}).str())) > 0);
    CHECK(std::stod(std::string(conn.command({"HGET", id, "beat"}).str())) > 1.7e9);
    const auto ttl = conn.command({"PTTL", id}).integer();
    CHECK(ttl > 50000);
    CHECK(ttl <= 60000);
    // The busy hash (6.4's :workers and 6.5+'s :work) holds the payload as a JSON string.
    for (const std::string key : {id + ":workers", id + ":work"}) {
        REQUIRE(wait_until([&] { return conn.command({"HLEN", key}).integer() == 1; }));
        auto all = conn.command({"HGETALL", key});
        auto entry = nlohmann::json::parse(all[1].str());
        CHECK(entry["queue"] == "slow");
        CHECK(entry["payload"] == original);
        CHECK(entry["run_at"].is_number_integer());
        CHECK(conn.command({"PTTL", key}).integer() <= 60000);
    }

    kiqd.signal(SIGTSTP);
    REQUIRE(wait_until([&] { return conn.command({"HGET", id, "quiet"}).str() == "true"; }));
    CHECK(kiqd.running());
    client.push(conn, {{"class", "Kiqd::Noop"}});
    // A quiet process runs nothing new. A BRPOP already in flight may still pop the job; it is
    // then pushed straight back (as in Sidekiq), so watch the log, not the queue length.
    CHECK_FALSE(kiqd.wait_for_output("class=Kiqd::Noop", std::chrono::milliseconds(2500)));
    REQUIRE(wait_until([&] { return llen(conn, "queue:default") == 1; }));

    CHECK(kiqd.stop() == 0);
    auto slow = kiqd::test::lrange(conn, "queue:slow");
    REQUIRE(slow.size() == 1);
    CHECK(slow[0] == original);  // byte-identical
    CHECK(conn.command({"SISMEMBER", "processes", id}).integer() == 0);
    CHECK(conn.command({"EXISTS", id + ":workers"}).integer() == 0);
    // The interrupted job counts as processed and failed, as in Sidekiq.
    CHECK(conn.command({"GET", "stat:processed"}).str() == "1");
    CHECK(conn.command({"GET", "stat:failed"}).str() == "1");
    CHECK_THAT(kiqd.output(), Catch::Contains("Pushed 1 jobs back to Redis"));
}

TEST_CASE("daemon: a second SIGTERM stops at once, still requeueing", "[daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    Client client(Keys{}, Compat::v6);
    client.push(conn, {{"class", "Kiqd::Sleep"}, {"args", {600}}});
    KiqdProcess kiqd(KIQD_BINARY, kiqd_config(server, "timeout: 300\nqueues: [default]\n"));
    const std::string id = wait_for_identity(conn);
    REQUIRE(wait_until([&] { return conn.command({"HGET", id, "busy"}).optional_str() == "1"; }));
    kiqd.signal(SIGTERM);
    REQUIRE(kiqd.wait_for_output("Shutting down"));
    CHECK(kiqd.running());  // waiting for the job (timeout 300 s)
    kiqd.signal(SIGTERM);
    CHECK(kiqd.wait_exit(std::chrono::seconds(20)) == 0);
    CHECK(llen(conn, "queue:default") == 1);
}

TEST_CASE("daemon: stats are flushed, scheduled jobs run, remote TERM stops", "[daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    Client client(Keys{}, Compat::v6);
    for (int i = 0; i < 5; ++i) client.push(conn, {{"class", "Kiqd::Noop"}});
    client.push(conn, {{"class", "Kiqd::Fail"}, {"args", {"x"}}});
    client.push(conn, {{"class", "Test::Record"}, {"at", epoch_seconds() + 1}, {"jid", "sched1"}});
    KiqdProcess kiqd(KIQD_TEST_DAEMON, kiqd_config(server, "queues: [default]\n"));
    const std::string id = wait_for_identity(conn);
    REQUIRE(wait_until([&] { return ran_count(conn) == 1; }, std::chrono::seconds(15)));
    CHECK(kiqd::test::ran_records(conn).at(0)["jid"] == "sched1");
    REQUIRE(wait_until([&] {
        return conn.command({"GET", "stat:processed"}).optional_str() == "7";
    }));
    CHECK(conn.command({"GET", "stat:failed"}).str() == "1");
    // Remote stop, as Sidekiq::Process#stop! sends it.
    conn.pipeline({{"LPUSH", id + "-signals", "TERM"}, {"EXPIRE", id + "-signals", "60"}});
    CHECK(kiqd.wait_exit() == 0);
    CHECK(conn.command({"SISMEMBER", "processes", id}).integer() == 0);
}

TEST_CASE("daemon: survives a Redis outage, one log line each way", "[daemon][outage]") {
    RedisServer server;  // its own server: this test stops it
    auto conn = server.connect();
    Client client(Keys{}, Compat::v6);
    for (int i = 0; i < 20; ++i) client.push(conn, {{"class", "Test::Record"}});
    KiqdProcess kiqd(KIQD_TEST_DAEMON, kiqd_config(server,
                                                   "concurrency: 4\nqueues: [default]\n"
                                                   "logging: {level: warn}\n"));
    REQUIRE(wait_until([&] { return ran_count(conn) == 20; }));
    server.stop();
    REQUIRE(kiqd.wait_for_output("Redis is unreachable"));
    server.start();  // same port, empty data set
    auto conn2 = server.connect();
    for (int i = 0; i < 20; ++i) client.push(conn2, {{"class", "Test::Record"}});
    REQUIRE(wait_until([&] { return ran_count(conn2) == 20; }, std::chrono::seconds(30)));
    CHECK(kiqd.running());
    CHECK(kiqd.stop() == 0);
    const auto out = kiqd.output();
    CHECK(kiqd::test::occurrences(out, "Redis is unreachable") == 1);
    CHECK(kiqd::test::occurrences(out, "Redis is back after") == 1);
}
