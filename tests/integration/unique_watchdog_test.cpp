// The stuck-lock watchdog [unique][watchdog]: `kiqd unique locks [--stale] [--json]` lists kiqd's
// run locks and the gem's client locks with their holders and whether those are still there,
// `kiqd unique unlock DIGEST` frees one identity, the LockKeeper's reaper frees stale client
// locks on its own (a holder missing in two passes), and a daemon's /metrics counts what its
// reaper freed. Against a real Redis and the real kiqd binary.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "kiqd_cli.hpp"
#include "middleware/pause/pause_control.hpp"
#include "middleware/unique/lock_keeper.hpp"
#include "middleware/unique/lock_survey.hpp"
#include "support/http_get.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/test_runtime.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using kiqd::test::kiqd_cli;
using kiqd::test::RedisServer;
using kiqd::test::TestRuntime;
using kiqd::test::wait_until;

namespace {

// What sidekiq-unique-jobs' client leaves after pushing `jid` under `digest`.
void push_client_lock(redis::Connection& c, const std::string& digest, const std::string& jid) {
    c.command({"SET", digest, jid});
    c.command({"HSET", digest + ":LOCKED", jid, "1700000000.5"});
    c.command({"ZADD", "uniquejobs:digests", "1700000000", digest});
}

// A job `jid` waiting in queue:default.
void queued_job(redis::Connection& c, const std::string& jid) {
    c.command({"SADD", "queues", "default"});
    c.command({"LPUSH", "queue:default", R"({"class":"X","jid":")" + jid + R"(","args":[]})"});
}

// A live process record (as a heartbeat writes it) for `identity`.
void live_process(redis::Connection& c, const std::string& identity) {
    c.command({"SADD", "processes", identity});
    c.command({"HSET", identity, "beat", "1"});
}

}  // namespace

TEST_CASE("unique watchdog: kiqd unique locks lists holders and stale locks; unlock frees one",
          "[unique][watchdog]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto c = server.connect();
    // A client lock whose job waits in a queue (alive), one whose job is running in a process
    // (alive: its busy hash names the jid), one whose job is nowhere (stale).
    push_client_lock(c, "uniquejobs:queued", "J1");
    queued_job(c, "J1");
    push_client_lock(c, "uniquejobs:busy", "J2");
    live_process(c, "host:1:aaaaaaaaaaaa");
    c.command({"HSET", "host:1:aaaaaaaaaaaa:work", "tid",
               R"({"queue":"default","payload":"{\"jid\":\"J2\"}","run_at":1})"});
    push_client_lock(c, "uniquejobs:lost", "J3");
    // kiqd run locks: one of a live process, one of a process that is gone.
    const std::string live_owner = LockKeeper::new_owner("host:1:aaaaaaaaaaaa");
    c.command({"SET", "uniquejobs:run1:EXEC", live_owner});
    c.command({"SET", "uniquejobs:run2:EXEC", "gone:2:bbbbbbbbbbbb ffff@1700000000.000"});
    c.command({"HSET", "kiqd:unique:held", "uniquejobs:run1:EXEC", live_owner,
               "uniquejobs:run2:EXEC", "gone:2:bbbbbbbbbbbb ffff@1700000000.000"});

    auto [code, out] = kiqd_cli(server, {"unique", "locks", "--json"});
    REQUIRE(code == 0);
    auto locks = nlohmann::json::parse(out)["locks"];
    REQUIRE(locks.size() == 5);
    std::map<std::string, nlohmann::json> by_digest;
    for (const auto& l : locks) by_digest[l["digest"].get<std::string>()] = l;
    CHECK(by_digest["uniquejobs:queued"]["alive"] == true);
    CHECK(by_digest["uniquejobs:queued"]["holder"] == "J1");
    CHECK(by_digest["uniquejobs:busy"]["alive"] == true);
    CHECK(by_digest["uniquejobs:lost"]["alive"] == false);
    CHECK(by_digest["uniquejobs:lost"]["kind"] == "client");
    CHECK(by_digest["uniquejobs:lost"]["age"].get<double>() > 0);
    CHECK(by_digest["uniquejobs:run1"]["kind"] == "run");
    CHECK(by_digest["uniquejobs:run1"]["alive"] == true);
    CHECK(by_digest["uniquejobs:run1"]["age"].get<double>() >= 0);
    CHECK(by_digest["uniquejobs:run2"]["holder"] == "gone:2:bbbbbbbbbbbb");
    CHECK(by_digest["uniquejobs:run2"]["alive"] == false);

    std::tie(code, out) = kiqd_cli(server, {"unique", "locks", "--stale"});
    CHECK(code == 0);
    CHECK_THAT(out, Catch::Contains("uniquejobs:lost") && Catch::Contains("uniquejobs:run2") &&
                        Catch::Contains("STALE"));
    CHECK_THAT(out, !Catch::Contains("uniquejobs:queued") && !Catch::Contains("uniquejobs:run1"));

    std::tie(code, out) = kiqd_cli(server, {"unique", "unlock", "uniquejobs:lost"});
    CHECK(code == 0);
    CHECK_THAT(out, Catch::Contains("unlocked uniquejobs:lost"));
    CHECK(c.command({"EXISTS", "uniquejobs:lost", "uniquejobs:lost:LOCKED"}).integer() == 0);
    CHECK(c.command({"ZSCORE", "uniquejobs:digests", "uniquejobs:lost"}).is_nil());
    std::tie(code, out) = kiqd_cli(server, {"unique", "unlock", "uniquejobs:lost"});
    CHECK(code == 1);  // nothing left to free
    std::tie(code, out) = kiqd_cli(server, {"unique", "unlock", "uniquejobs:run2"});
    CHECK(code == 0);
    CHECK(c.command({"HEXISTS", "kiqd:unique:held", "uniquejobs:run2:EXEC"}).integer() == 0);
}

TEST_CASE("unique watchdog: the reaper frees a client lock whose holder is missing twice",
          "[unique][watchdog]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto c = server.connect();
    TestRuntime t(server);
    LockKeeper keeper(t.keys, server.options(), std::chrono::seconds(60), TestRuntime::kIdentity,
                      *t.log);
    push_client_lock(c, "uniquejobs:queued", "J1");
    queued_job(c, "J1");
    push_client_lock(c, "uniquejobs:lost", "J3");
    push_client_lock(c, "uniquejobs:late", "J4");
    CHECK(keeper.reap(c, false) == 0);  // first sighting: only suspected
    // J4's job shows up (it was on its way, e.g. being scheduled): not freed.
    c.command({"ZADD", "retry", "1", R"({"class":"X","jid":"J4","args":[]})"});
    CHECK(keeper.reap(c, false) == 1);
    CHECK(c.command({"EXISTS", "uniquejobs:lost", "uniquejobs:lost:LOCKED"}).integer() == 0);
    CHECK(c.command({"ZSCORE", "uniquejobs:digests", "uniquejobs:lost"}).is_nil());
    CHECK(c.command({"EXISTS", "uniquejobs:queued:LOCKED"}).integer() == 1);
    CHECK(c.command({"EXISTS", "uniquejobs:late:LOCKED"}).integer() == 1);
    CHECK(keeper.reaped_total() == 1);
}

TEST_CASE("unique watchdog: a paused worker's parked job keeps its client lock",
          "[unique][watchdog][pause]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto c = server.connect();
    TestRuntime t(server);
    LockKeeper keeper(t.keys, server.options(), std::chrono::seconds(60), TestRuntime::kIdentity,
                      *t.log);
    // The parked set is keyed by the worker name ("kiqd/parked_worker"), not the class name.
    push_client_lock(c, "uniquejobs:parked", "J5");
    const ParkedJobs parked(t.keys, Compat::v7);
    parked.park(c, "Kiqd::ParkedWorker",
                R"({"class":"Kiqd::ParkedWorker","queue":"default","jid":"J5","args":[]})",
                "manual");
    const auto locks = survey_unique_locks(c, t.keys);
    REQUIRE(locks.size() == 1);
    CHECK(locks[0].holder == "J5");
    CHECK(locks[0].alive);
    CHECK(keeper.reap(c, false) == 0);
    CHECK(keeper.reap(c, false) == 0);
    CHECK(c.command({"HEXISTS", "uniquejobs:parked:LOCKED", "J5"}).integer() == 1);
}

TEST_CASE("unique watchdog: a daemon's reaper frees stale locks and /metrics counts them",
          "[unique][watchdog][daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto c = server.connect();
    push_client_lock(c, "uniquejobs:lost", "J3");
    const int port = kiqd::test::free_port();
    kiqd::test::KiqdProcess kiqd(
        KIQD_BINARY,
        kiqd::test::default_queue_config(server,
                                         "unique_jobs: {reaper_interval: 0.5}\nmetrics: {listen: "
                                         "127.0.0.1:" +
                                             std::to_string(port) + "}\n"));
    REQUIRE(wait_until(
        [&] {
            return c.command({"EXISTS", "uniquejobs:lost:LOCKED"}).integer() == 0;
        },
        std::chrono::seconds(20)));
    REQUIRE(wait_until([&] {
        return kiqd::test::http_get(port, "/metrics")
                   .second.find("kiqd_unique_locks_reaped_total 1") != std::string::npos;
    }));
    CHECK(kiqd.stop() == 0);
}
