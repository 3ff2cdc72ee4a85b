// Hardening of reliable fetch against a real Redis: the poison-pill guard counts only
// interruptions a job suffered (not jobs that waited in a dead process's fetch buffer), a long
// recovery pass does not let the process's own liveness key lapse, a job a middleware takes out
// of the working list (park, fair-tenant move) is not acknowledged again by value, and an
// outcome that is a transaction of its own is written with its acknowledgement in one MULTI, and
// a process stopped past its liveness TTL does not start buffered jobs it no longer owns.
#include <signal.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "kiqd/clock.hpp"
#include "middleware/fair_tenant.hpp"
#include "middleware/limits/throttle.hpp"
#include "server/orphan_recovery.hpp"
#include "server/processor.hpp"
#include "support/job_pushes.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/test_daemon_records.hpp"
#include "support/test_runtime.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using kiqd::test::KiqdProcess;
using kiqd::test::llen;
using kiqd::test::lrange;
using kiqd::test::only_member;
using kiqd::test::RedisServer;
using kiqd::test::TestRuntime;
using kiqd::test::wait_until;
using kiqd::test::zcard;
using list_of = std::vector<std::string>;

namespace {

std::string record_job(const std::string& jid, nlohmann::json args = nlohmann::json::array()) {
    return nlohmann::json{{"class", "Test::Record"},
                          {"args", std::move(args)},
                          {"jid", jid},
                          {"queue", "default"},
                          {"retry", 3},
                          {"created_at", 1.7e9},
                          {"enqueued_at", 1.7e9}}
        .dump();
}

// The identity in a working list's name ("queue:sq|<identity>|<queue>").
std::string identity_of(const std::string& working_list) {
    const auto first = working_list.find('|');
    return working_list.substr(first + 1, working_list.rfind('|') - first - 1);
}

// A middleware that runs `after` once the rest of the chain has returned: what another thread
// or process does between a middleware's park and the processor's acknowledgement.
class After final : public ServerMiddleware {
  public:
    explicit After(std::function<void(JobContext&)> after) : after_(std::move(after)) {}
    std::string_view name() const override { return "after"; }
    void call(JobContext& ctx, const Next& next) const override {
        next();
        after_(ctx);
    }

  private:
    std::function<void(JobContext&)> after_;
};

}  // namespace

TEST_CASE(
    "poison-pill guard: jobs that waited in a dead process's fetch buffer are not counted; "
    "a job that really ran each time still goes to the dead set",
    "[reliable][hardening][daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    // One thread: the pill runs until the process dies, the ten others wait behind it in the
    // fetch buffer (batch 50 takes all eleven in one round trip).
    std::vector<std::string> jobs{record_job("pill", nlohmann::json::array({600}))};
    for (int i = 0; i < 10; ++i) jobs.push_back(record_job("innocent" + std::to_string(i)));
    kiqd::test::push_raw(conn, "default", jobs);
    const std::string yaml = kiqd::test::kiqd_config(
        server,
        "concurrency: 1\nqueues: [default]\nfetch: reliable\n"
        "reliable_fetch: {batch_size: 50, max_interruptions: 3, liveness_ttl: 3}\n");
    // The recovery a surviving process would run (with the same max_interruptions).
    TestRuntime t(server, {{"default", 0}}, 1, FetchMode::reliable);
    t.config.reliable_fetch.max_interruptions = 3;
    OrphanRecovery recovery(t.rt, *t.reliable());

    int kills = 0;
    while (zcard(conn, "dead") == 0 && kills < 8) {
        {
            KiqdProcess victim(KIQD_TEST_DAEMON, yaml);
            REQUIRE(
                victim.wait_for_output("jid=pill queue=default start", std::chrono::seconds(20)));
            CHECK(llen(conn, "queue:default") == 0);  // all eleven fetched
            victim.signal(SIGKILL);
            CHECK(victim.wait_exit() == 128 + SIGKILL);
        }
        ++kills;
        const auto working = only_member(conn, "kiqd:reliable:working");
        REQUIRE(working);
        REQUIRE(llen(conn, *working) == 11);
        // Its liveness key would expire within liveness_ttl; the process is gone, so no wait.
        conn.command({"DEL", "kiqd:reliable:alive:" + identity_of(*working)});
        const auto r = recovery.recover_orphans(conn, false);
        std::printf("poison pill: kill %d: %zu job(s) requeued, %zu sent to the dead set\n", kills,
                    r.requeued, r.dead);
        CHECK(r.requeued + r.dead == 11);
    }
    // The ten never ran: each kill found them in the fetch buffer.
    CHECK(kiqd::test::ran_count(conn) == 0);
    // Only the pill is dead: after max_interruptions kills that are known to have interrupted it
    // (with batched fetch its start becomes known from its second run on: see
    // docs/hardening-shutdown.md).
    const auto dead = kiqd::test::zrange(conn, "dead");
    REQUIRE(dead.size() == 1);
    const auto entry = nlohmann::json::parse(dead[0]);
    CHECK(entry["jid"] == "pill");
    CHECK(entry["error_class"] == "Kiqd::RepeatedlyInterrupted");
    CHECK(kills == 4);
    // The ten run once, in a process left alone.
    KiqdProcess survivor(KIQD_TEST_DAEMON, yaml);
    REQUIRE(wait_until([&] { return kiqd::test::ran_count(conn) == 10; }));
    CHECK(survivor.stop() == 0);
    CHECK(kiqd::test::jids_of(kiqd::test::ran_records(conn)).size() == 10);
    CHECK(zcard(conn, "dead") == 1);
}

TEST_CASE("orphan recovery: a long recovery pass does not let this process's liveness key lapse",
          "[reliable][hardening]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    TestRuntime t(server, {{"default", 0}}, 1, FetchMode::reliable, 1);
    t.config.reliable_fetch.liveness_ttl = std::chrono::seconds(3);  // the smallest allowed
    // A dead process left many jobs: recovering them (one script call each) takes longer than
    // the liveness TTL on this machine.
    const std::string orphans = "queue:sq|gonehost:7:0123456789ab|default";
    constexpr int kOrphans = 200000;
    for (int start = 0; start < kOrphans; start += 1000) {
        redis::Command lpush{"LPUSH", orphans};
        for (int i = start; i < start + 1000; ++i)
            lpush.push_back(kiqd::test::noop_payload("orphan" + std::to_string(i)));
        conn.command(lpush);
    }
    conn.command({"SADD", "kiqd:reliable:working", orphans});
    const std::string alive = "kiqd:reliable:alive:" + std::string(TestRuntime::kIdentity);

    OrphanRecovery recovery(t.rt, *t.reliable());
    recovery.start();
    REQUIRE(wait_until([&] { return conn.command({"EXISTS", alive}).integer() == 1; }));
    const auto started = std::chrono::steady_clock::now();
    bool lapsed = false;
    REQUIRE(wait_until(
        [&] {
            if (conn.command({"EXISTS", alive}).integer() == 0) lapsed = true;
            return lapsed || llen(conn, orphans) == 0;
        },
        std::chrono::seconds(300)));
    std::printf("recovery of %d orphans: %.1f s so far; liveness key lapsed: %s\n", kOrphans,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
                lapsed ? "yes" : "no");
    CHECK_FALSE(lapsed);
    REQUIRE(wait_until([&] { return llen(conn, orphans) == 0; }, std::chrono::seconds(300)));
    recovery.stop(false);
    CHECK(llen(conn, "queue:default") == kOrphans);
}

TEST_CASE(
    "reliable fetch: a job a middleware took out of the working list is not acknowledged "
    "again (which would remove an identical copy fetched since)",
    "[reliable][hardening]") {
    const int batch = GENERATE(1, 50);
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    auto other = server.connect();  // another processor thread's connection
    TestRuntime t(server, {{"default", 0}}, 2, FetchMode::reliable, batch);
    t.reliable();
    t.config.classes["Kiqd::Noop"].throttle = ThrottleSpec{1, 86400, LimitScope::job_class, -1};
    const std::string first = kiqd::test::noop_payload("first"),
                      second = kiqd::test::noop_payload("second");
    std::optional<UnitOfWork> refetched;
    std::mt19937_64 rng(1);
    // After the throttle parked `second` (the limit is one job a day): the scheduler moves it
    // back once its window opens, and another thread fetches it again, the same bytes.
    t.chain.add(std::make_shared<After>([&](JobContext& ctx) {
        if (ctx.job.raw != second) return;
        REQUIRE(conn.command({"ZREM", "schedule", second}).integer() == 1);
        conn.command({"RPUSH", "queue:default", second});
        refetched = t.fetcher.retrieve_work(other, rng, 1);
    }));
    t.chain.add(std::make_shared<ThrottleMiddleware>(t.config, t.keys));
    kiqd::test::push_raw(conn, "default", {first, second});
    Processor p(t.rt, 0, {});
    auto unit = t.fetcher.retrieve_work(conn, rng, 0);
    REQUIRE(unit);
    p.process(conn, *unit);  // runs
    unit = t.fetcher.retrieve_work(conn, rng, 0);
    REQUIRE(unit);
    REQUIRE(unit->payload == second);
    p.process(conn, *unit);  // parked, and fetched again meanwhile
    REQUIRE(refetched);
    CHECK(refetched->payload == second);
    // Deferred acknowledgements go out with the next write (here: a stop's release).
    if (auto release = t.fetcher.release_commands(); !release.empty()) conn.pipeline(release);
    // The copy the other thread runs is still protected by the working list.
    CHECK(lrange(conn, TestRuntime::kWorkingDefault) == list_of{second});
}

TEST_CASE(
    "fair tenant: a job moved to a throttled queue leaves the working list in the same "
    "step",
    "[reliable][hardening][fair_tenant]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    TestRuntime t(server, {{"default", 0}}, 1, FetchMode::reliable, 1);
    t.reliable();
    const std::string raw =
        nlohmann::json{{"class", "Kiqd::Noop"},
                       {"args", nlohmann::json::array()},
                       {"jid", "tenantjob"},
                       {"queue", "default"},
                       {"fair_tenant", "acme"},
                       {"fair_tenant_queues", {{{"queue", "throttled"}, {"threshold", 0}}}}}
            .dump();
    // What a crash right after the move would leave behind.
    std::vector<std::string> working_after_move;
    t.chain.add(std::make_shared<After>(
        [&](JobContext&) { working_after_move = lrange(conn, TestRuntime::kWorkingDefault); }));
    t.chain.add(std::make_shared<FairTenantServerMiddleware>(t.config, t.keys));
    kiqd::test::push_raw(conn, "default", {raw});
    std::mt19937_64 rng(1);
    auto unit = t.fetcher.retrieve_work(conn, rng, 0);
    REQUIRE(unit);
    Processor p(t.rt, 0, {});
    p.process(conn, *unit);
    REQUIRE(llen(conn, "queue:throttled") == 1);
    CHECK(working_after_move.empty());  // not in both places at any time
    CHECK(llen(conn, TestRuntime::kWorkingDefault) == 0);
}

TEST_CASE("reliable fetch: a dead-set outcome and its acknowledgement are one transaction",
          "[reliable][hardening]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    TestRuntime t(server, {{"default", 0}}, 1, FetchMode::reliable, 1);
    t.reliable();
    // retry: 0 → straight to the dead set (bare dead-set commands that join the acknowledgement's
    // MULTI); an unparseable payload → the dead set too.
    kiqd::test::push_raw(
        conn, "default",
        {R"({"class":"Kiqd::Fail","args":["boom"],"jid":"deadjob","queue":"default","retry":0})",
         "not json"});
    std::mt19937_64 rng(1);
    Processor p(t.rt, 0, {});
    for (int i = 0; i < 2; ++i) {
        auto unit = t.fetcher.retrieve_work(conn, rng, 0);
        REQUIRE(unit);
        p.process(conn, *unit);
    }
    CHECK(zcard(conn, "dead") == 2);
    CHECK(llen(conn, TestRuntime::kWorkingDefault) == 0);
    const auto logs = t.logs();
    CHECK_THAT(logs, !Catch::Contains("Redis refused"));
    CHECK_THAT(logs, !Catch::Contains("nested"));
}

TEST_CASE(
    "reliable fetch daemon: a process stopped past liveness_ttl does not start the buffered "
    "jobs another process recovered meanwhile",
    "[reliable][hardening][daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    std::vector<std::string> jobs;
    for (int i = 0; i < 300; ++i)
        jobs.push_back(record_job("stall" + std::to_string(i), nlohmann::json::array({0.05})));
    kiqd::test::push_raw(conn, "default", jobs);
    const std::string yaml = kiqd::test::kiqd_config(
        server,
        "concurrency: 2\nqueues: [default]\nfetch: reliable\n"
        "reliable_fetch: {batch_size: 50, liveness_ttl: 3, orphan_check_interval: 1}\n");
    KiqdProcess a(KIQD_TEST_DAEMON, yaml);
    REQUIRE(
        wait_until([&] { return kiqd::test::ran_count(conn) >= 20; }, std::chrono::seconds(30)));
    // A stall (a VM pause, swap): the process and its buffer stay, its liveness key lapses.
    const double stopped_at = kiqd::epoch_seconds();
    a.signal(SIGSTOP);
    const auto working = only_member(conn, "kiqd:reliable:working");
    REQUIRE(working);
    const long long held = llen(conn, *working);
    CHECK(held > 2);  // more than its two running jobs: it has jobs buffered
    KiqdProcess b(KIQD_TEST_DAEMON, yaml);
    REQUIRE(b.wait_for_output("recovering " + *working, std::chrono::seconds(30)));
    REQUIRE(wait_until([&] { return llen(conn, *working) == 0; }));
    a.signal(SIGCONT);
    REQUIRE(wait_until(
        [&] {
            return kiqd::test::jids_of(kiqd::test::ran_records(conn)).size() == 300 &&
                   llen(conn, "queue:default") == 0;
        },
        std::chrono::seconds(60)));
    CHECK(a.stop() == 0);
    CHECK(b.stop() == 0);
    // A jid may run twice only if the stopped process had started it before the stall (its
    // running jobs, and finished ones whose deferred acknowledgement had not gone out: recovered
    // and run again by the other process, at-least-once).
    std::map<std::string, std::vector<nlohmann::json>> runs;
    for (auto& r : kiqd::test::ran_records(conn)) runs[r["jid"]].push_back(r);
    size_t duplicates = 0, unexplained = 0;
    for (const auto& [jid, of_jid] : runs) {
        if (of_jid.size() < 2) continue;
        ++duplicates;
        bool started_before_stall = false;
        for (const auto& r : of_jid)
            if (r["pid"] == a.pid() && r["started"].get<double>() < stopped_at)
                started_before_stall = true;
        if (!started_before_stall) ++unexplained;
    }
    std::printf(
        "stall past liveness_ttl: %lld job(s) in the working list at the stop, %zu jid(s) ran "
        "more than once, %zu of them not started before the stall\n",
        held, duplicates, unexplained);
    CHECK(runs.size() == 300);
    CHECK(unexplained == 0);
    CHECK_THAT(a.output(), Catch::Contains("not started: this process was away"));
}

TEST_CASE(
    "reliable fetch: a job recovered by another process while this one was away gets no retry "
    "entry and no requeue from it (that would be a second copy)",
    "[reliable][hardening]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    TestRuntime t(server, {{"default", 0}}, 1, FetchMode::reliable, 1);
    t.reliable();
    // What another process's orphan recovery does while this one cannot reach Redis.
    auto recover = [&](const std::string& payload) {
        REQUIRE(conn.command({"LREM", TestRuntime::kWorkingDefault, "1", payload}).integer() == 1);
        conn.command({"RPUSH", "queue:default", payload});
    };
    std::mt19937_64 rng(1);
    Processor p(t.rt, 0, {});

    const std::string failing =
        R"({"class":"Kiqd::Fail","args":["boom"],"jid":"away1","queue":"default","retry":3})";
    kiqd::test::push_raw(conn, "default", {failing});
    auto unit = t.fetcher.retrieve_work(conn, rng, 0);
    REQUIRE(unit);
    recover(unit->payload);
    p.process(conn, *unit);  // fails; its retry entry would be a copy of the recovered job
    CHECK(zcard(conn, "retry") == 0);
    CHECK(lrange(conn, "queue:default") == list_of{failing});
    conn.command({"DEL", "queue:default"});

    const std::string plain = kiqd::test::noop_payload("away2");
    kiqd::test::push_raw(conn, "default", {plain});
    unit = t.fetcher.retrieve_work(conn, rng, 0);
    REQUIRE(unit);
    recover(unit->payload);
    conn.pipeline(t.fetcher.requeue_commands({*unit}));  // a shutdown's requeue
    CHECK(lrange(conn, "queue:default") == list_of{plain});
    CHECK(llen(conn, TestRuntime::kWorkingDefault) == 0);
}
