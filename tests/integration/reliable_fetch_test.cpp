// Reliable fetch against a real Redis: the working list holds every fetched job until its
// outcome is written, orphan recovery returns the jobs of dead processes (once, in order, with
// the poison-pill guard), and — with real daemons — kill -9 in the middle of 10,000 jobs loses
// none of them.
#include <signal.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <thread>

#include "kiqd/client.hpp"
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
using kiqd::test::ran_count;
using kiqd::test::RedisServer;
using kiqd::test::TestRuntime;
using kiqd::test::wait_until;
using kiqd::test::zcard;
using list_of = std::vector<std::string>;

namespace {

const std::string kDeadOwner = "gonehost:7:0123456789ab";

// Leaves `payloads` in the working list of a process that died without a trace: registered,
// liveness key gone. `payloads` are in fetch order (the first was fetched first).
void leave_orphans(redis::Connection& c, const std::vector<std::string>& payloads,
                   const std::string& queue = "default") {
    const std::string working = "queue:sq|" + kDeadOwner + "|" + queue;
    for (const auto& p : payloads) c.command({"LPUSH", working, p});
    c.command({"SADD", "kiqd:reliable:working", working});
}

}  // namespace

TEST_CASE("reliable fetch: a job stays in the working list until its outcome is written",
          "[reliable]") {
    auto& server = RedisServer::shared();
    server.flushall();
    // One job per fetch (batch_size 1); batched_fetch_test.cpp covers the batched default.
    TestRuntime t(server, {{"default", 0}}, 2, FetchMode::reliable, 1);
    t.reliable();
    auto conn = server.connect();
    Client client(t.keys, Compat::v6);
    client.push(conn, {{"class", "Kiqd::Noop"}});
    client.push(conn, {{"class", "Kiqd::Fail"}, {"args", {"kaboom"}}, {"retry", 5}});
    conn.command({"LPUSH", "queue:default", "{not json"});
    Processor p(t.rt, 0, {});
    std::mt19937_64 rng(1);

    for (int i = 0; i < 3; ++i) {
        auto unit = t.fetcher.retrieve_work(conn, rng, 0);
        REQUIRE(unit);
        // Moved, not popped: the queue lost it and the working list has it, byte for byte.
        CHECK(lrange(conn, TestRuntime::kWorkingDefault) == list_of{unit->payload});
        p.process(conn, std::move(*unit));
        CHECK(llen(conn, TestRuntime::kWorkingDefault) == 0);
    }
    CHECK(llen(conn, "queue:default") == 0);
    CHECK(zcard(conn, "retry") == 1);  // Kiqd::Fail
    CHECK(zcard(conn, "dead") == 1);   // the invalid payload
    CHECK(t.work.processed == 2);
    CHECK(t.work.failed == 1);
}

TEST_CASE("reliable fetch: an idle thread blocks on one queue and takes what arrives there",
          "[reliable]") {
    // (Strict order and requeue: "fetch: weights decide the order…" runs in both modes.)
    auto& server = RedisServer::shared();
    server.flushall();
    TestRuntime t(server, {{"a", 0}, {"b", 0}}, 2, FetchMode::reliable);
    t.reliable();
    auto conn = server.connect();
    std::optional<UnitOfWork> late;
    std::thread fetcher([&] {
        auto c = server.connect();
        std::mt19937_64 r(2);
        late = t.fetcher.retrieve_work(c, r, 1);  // slot 1 waits on queue b first
    });
    REQUIRE(wait_until([&] {
        return conn.command({"CLIENT", "LIST", "TYPE", "normal"}).str().find("cmd=brpoplpush") !=
               std::string::npos;
    }));
    conn.command({"LPUSH", "queue:b", "b2"});
    fetcher.join();
    REQUIRE(late);
    CHECK(late->queue == "b");
    CHECK(late->payload == "b2");
    CHECK(lrange(conn, "queue:sq|testhost:1:abcdef012345|b") == list_of{"b2"});
}

TEST_CASE("orphan recovery: jobs of dead processes go back in order, live ones are left alone",
          "[reliable]") {
    auto& server = RedisServer::shared();
    server.flushall();
    TestRuntime t(server, {{"default", 0}}, 2, FetchMode::reliable);
    OrphanRecovery recovery(t.rt, *t.reliable());
    auto conn = server.connect();
    recovery.register_alive(conn);
    CHECK(conn.command({"SISMEMBER", "kiqd:reliable:working", TestRuntime::kWorkingDefault})
              .integer() == 1);
    CHECK(conn.command({"EXISTS", "kiqd:reliable:alive:testhost:1:abcdef012345"}).integer() == 1);

    // A live process (its liveness key exists) and a dead one, and this process's own list.
    const std::string live = "queue:sq|livehost:2:aaaaaaaaaaaa|default";
    conn.command({"LPUSH", live, kiqd::test::noop_payload("live1")});
    conn.command({"SADD", "kiqd:reliable:working", live});
    conn.command({"SET", "kiqd:reliable:alive:livehost:2:aaaaaaaaaaaa", "1", "EX", "60"});
    conn.command({"LPUSH", TestRuntime::kWorkingDefault, kiqd::test::noop_payload("mine1")});
    conn.command({"LPUSH", "queue:default", kiqd::test::noop_payload("queued1")});
    leave_orphans(conn,
                  {kiqd::test::noop_payload("o1"), kiqd::test::noop_payload("o2"), "{not json"});

    auto r = recovery.recover_orphans(conn);
    CHECK(r.ran);
    CHECK(r.lists == 1);
    CHECK(r.requeued == 3);
    CHECK(r.dead == 0);
    // The orphans are at the popping end, the first-fetched one first; the queued job after them.
    CHECK(lrange(conn, "queue:default") == list_of{kiqd::test::noop_payload("queued1"), "{not json",
                                                   kiqd::test::noop_payload("o2"),
                                                   kiqd::test::noop_payload("o1")});
    CHECK(conn.command({"EXISTS", "queue:sq|" + kDeadOwner + "|default"}).integer() == 0);
    CHECK(
        conn.command({"SISMEMBER", "kiqd:reliable:working", "queue:sq|" + kDeadOwner + "|default"})
            .integer() == 0);
    CHECK(lrange(conn, live) == list_of{kiqd::test::noop_payload("live1")});
    CHECK(lrange(conn, TestRuntime::kWorkingDefault) == list_of{kiqd::test::noop_payload("mine1")});

    // The cluster-wide lock: a second pass within the interval does not run.
    leave_orphans(conn, {kiqd::test::noop_payload("o3")});
    CHECK_FALSE(recovery.recover_orphans(conn).ran);
    CHECK(llen(conn, "queue:sq|" + kDeadOwner + "|default") == 1);
    CHECK(recovery.recover_orphans(conn, false).requeued == 1);
}

TEST_CASE(
    "reliable fetch: a job stranded in this process's working list (its fetch reply was "
    "lost) goes back; running jobs stay",
    "[reliable]") {
    auto& server = RedisServer::shared();
    server.flushall();
    TestRuntime t(server, {{"default", 0}}, 2, FetchMode::reliable);
    OrphanRecovery recovery(t.rt, *t.reliable());
    auto conn = server.connect();
    // One job a processor runs, one that Redis moved but no processor ever received.
    conn.command({"LPUSH", TestRuntime::kWorkingDefault, kiqd::test::noop_payload("running"),
                  kiqd::test::noop_payload("stranded")});
    t.work.begin(0, RunningJob{"default", kiqd::test::noop_payload("running"), "Kiqd::Noop",
                               "running", 0, std::chrono::steady_clock::now()});
    const auto after = std::chrono::milliseconds(200);
    CHECK(recovery.return_stranded(conn, after) == 0);  // first sight: only a suspect
    CHECK(llen(conn, TestRuntime::kWorkingDefault) == 2);
    REQUIRE(wait_until([&] { return recovery.return_stranded(conn, after) == 1; }));
    CHECK(lrange(conn, TestRuntime::kWorkingDefault) ==
          list_of{kiqd::test::noop_payload("running")});
    CHECK(lrange(conn, "queue:default") == list_of{kiqd::test::noop_payload("stranded")});
    CHECK(conn.command({"HLEN", "kiqd:reliable:interruptions"}).integer() == 0);  // not counted
    t.work.finish(0);
}

TEST_CASE("orphan recovery: a job interrupted max_interruptions times goes to the dead set",
          "[reliable]") {
    auto& server = RedisServer::shared();
    server.flushall();
    TestRuntime t(server, {{"default", 0}}, 2, FetchMode::reliable);
    t.config.reliable_fetch.max_interruptions = 3;
    OrphanRecovery recovery(t.rt, *t.reliable());
    auto conn = server.connect();
    const std::string pill = kiqd::test::noop_payload("pill");
    for (int interruption = 1; interruption <= 3; ++interruption) {
        leave_orphans(conn,
                      {pill, kiqd::test::noop_payload("innocent" + std::to_string(interruption))});
        auto r = recovery.recover_orphans(conn, false);
        CHECK(r.requeued == (interruption < 3 ? 2u : 1u));
        CHECK(r.dead == (interruption < 3 ? 0u : 1u));
        conn.command({"DEL", "queue:default"});  // as if a new process took them and died too
    }
    auto dead = kiqd::test::zrange(conn, "dead");
    REQUIRE(dead.size() == 1);
    auto entry = nlohmann::json::parse(dead[0]);
    CHECK(entry["jid"] == "pill");
    CHECK(entry["class"] == "Kiqd::Noop");
    CHECK(entry["error_class"] == "Kiqd::RepeatedlyInterrupted");
    CHECK_THAT(entry["error_message"].get<std::string>(), Catch::Contains("interrupted 3 times"));
    CHECK(conn.command({"HEXISTS", "kiqd:reliable:interruptions", "pill"}).integer() == 0);
    CHECK(conn.command({"HGET", "kiqd:reliable:interruptions", "innocent1"}).str() == "1");
}

TEST_CASE("reliable fetch daemon: kill -9 during 10,000 jobs loses none of them",
          "[reliable][daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    constexpr int kJobs = 10000;
    std::mt19937_64 rng(42);
    kiqd::test::push_jobs(conn, kJobs, [&](int) {
        const double seconds = static_cast<double>(1 + rng() % 20) / 1000.0;  // 1–20 ms
        return nlohmann::ordered_json{{"class", "Test::Record"}, {"args", {seconds}}};
    });
    const std::string yaml = kiqd::test::kiqd_config(
        server,
        "concurrency: 10\nlogging: {level: warn}\nqueues: [default]\nfetch: reliable\n"
        "reliable_fetch: {liveness_ttl: 3, orphan_check_interval: 1}\n");
    {
        KiqdProcess victim(KIQD_TEST_DAEMON, yaml);
        REQUIRE(wait_until([&] { return ran_count(conn) >= 2000; }, std::chrono::seconds(60)));
        victim.signal(SIGKILL);
        CHECK(victim.wait_exit() == 128 + SIGKILL);
    }
    // Jobs the victim was running are in its working list now, not in the queue.
    const auto registered = only_member(conn, "kiqd:reliable:working");
    REQUIRE(registered);  // the victim's list, and only it
    const std::string victim_list = *registered;
    // Jobs were running at the kill, so recovery has something to do.
    REQUIRE(llen(conn, victim_list) > 0);

    KiqdProcess successor(KIQD_TEST_DAEMON, yaml);
    // Done when the queue and every working list are empty: a job is recorded before it is
    // acknowledged, so by then every run has left its evidence.
    auto all_working_lists_empty = [&] {
        auto members = conn.command({"SMEMBERS", "kiqd:reliable:working"});
        for (size_t i = 0; i < members.size(); ++i)
            if (llen(conn, std::string(members[i].str())) > 0) return false;
        return true;
    };
    REQUIRE(wait_until(
        [&] {
            return llen(conn, "queue:default") == 0 && llen(conn, victim_list) == 0 &&
                   all_working_lists_empty() && ran_count(conn) >= kJobs;
        },
        std::chrono::seconds(120)));
    CHECK(successor.stop() == 0);

    const auto ran = kiqd::test::ran_records(conn);
    const auto jids = kiqd::test::jids_of(ran);
    const size_t duplicates = ran.size() - jids.size();
    std::printf("kill -9 test: %d jobs, %zu runs recorded, %zu distinct, %zu duplicates\n", kJobs,
                ran.size(), jids.size(), duplicates);
    CHECK(jids.size() == static_cast<size_t>(kJobs));  // none lost
    // At-least-once: only the jobs that were running at the kill (at most one per thread) and
    // the finished ones whose acknowledgement was deferred to the next batched fetch (at most
    // batch_size + concurrency) can have run twice.
    CHECK(duplicates <= 10 + ReliableFetchConfig::kDefaultBatchSize + 10);
    CHECK(zcard(conn, "dead") == 0);
    CHECK(zcard(conn, "retry") == 0);
    // Nothing is left registered: the victim's list was recovered, the successor unregistered.
    CHECK(conn.command({"SCARD", "kiqd:reliable:working"}).integer() == 0);
}

TEST_CASE("reliable fetch daemon: SIGTERM requeues the running job and unregisters",
          "[reliable][daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    Client client(Keys{}, Compat::v6);
    client.push(conn, {{"class", "Kiqd::Sleep"}, {"args", {60}}, {"queue", "slow"}});
    const std::string original(conn.command({"LINDEX", "queue:slow", "0"}).str());
    KiqdProcess kiqd(KIQD_BINARY,
                     kiqd::test::kiqd_config(server,
                                             "concurrency: 2\ntimeout: 1\nqueues: [slow]\n"
                                             "fetch: reliable\n"));
    std::string working;
    REQUIRE(wait_until([&] {
        const auto registered = only_member(conn, "kiqd:reliable:working");
        if (!registered) return false;
        working = *registered;
        return llen(conn, working) == 1;
    }));
    CHECK(llen(conn, "queue:slow") == 0);
    CHECK(kiqd.stop() == 0);
    CHECK(lrange(conn, "queue:slow") == list_of{original});  // byte for byte
    CHECK(conn.command({"EXISTS", working}).integer() == 0);
    CHECK(conn.command({"SCARD", "kiqd:reliable:working"}).integer() == 0);
    CHECK(conn.command({"KEYS", "kiqd:reliable:alive:*"}).size() == 0);
}
