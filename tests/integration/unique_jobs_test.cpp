// Unique jobs against a real Redis: the two-key scheme step by step (in-process, driving the
// middleware directly), lock release on failure, token ownership, the gem's client locks, the
// keeper's extension and reaper — and with real daemons, 3 processes × 5 threads hammering the
// same identities with duplicates (no overlap, no lost update, at most one waiter), and kill -9
// of a lock holder.
#include "middleware/unique/unique_jobs.hpp"

#include <signal.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "job/raw_json_object.hpp"
#include "kiqd/client.hpp"
#include "kiqd/clock.hpp"
#include "support/kiqd_fleet.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/run_through.hpp"
#include "support/test_daemon_records.hpp"
#include "support/test_runtime.hpp"
#include "support/unique_fixture.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using kiqd::test::command_calls;
using kiqd::test::gem_client_lock;
using kiqd::test::held_lock_count;
using kiqd::test::held_locks;
using kiqd::test::KiqdFleet;
using kiqd::test::KiqdProcess;
using kiqd::test::lock_holders;
using kiqd::test::ran_count;
using kiqd::test::RedisServer;
using kiqd::test::TestRuntime;
using kiqd::test::UniqueFixture;
using kiqd::test::wait_until;
using kiqd::test::zcard;
using kiqd::test::zrange;

namespace {

std::string payload(const std::string& jid, const std::string& lock = "until_and_while_executing",
                    const std::string& extra = "") {
    return R"({"class":"Sync","queue":"default","args":["acct-1"],"jid":")" + jid +
           R"(","lock":")" + lock + R"(","lock_digest":"uniquejobs:acct1")" + extra + "}";
}

bool key_exists(redis::Connection& c, const std::string& key) {
    return c.command({"EXISTS", key}).integer() == 1;
}

}  // namespace

TEST_CASE(
    "unique: until_and_while_executing — one runs, one waits parked, others are "
    "duplicates; the waiter runs next",
    "[unique]") {
    auto& server = RedisServer::shared();
    server.flushall();
    UniqueFixture f(server);
    auto& c = f.conn;
    std::string parked;
    const bool a_ran = f.run(payload("A"), [&] {
        CHECK(key_exists(c, "uniquejobs:acct1:EXEC"));
        CHECK_FALSE(key_exists(c, "uniquejobs:acct1:WAIT"));
        // B arrives while A runs: it takes the wait lock and is parked, not run.
        CHECK_FALSE(f.run(payload("B")));
        const auto wait_token = std::string(c.command({"GET", "uniquejobs:acct1:WAIT"}).str());
        auto scheduled = zrange(c, "schedule");
        REQUIRE(scheduled.size() == 1);
        parked = scheduled[0];
        CHECK_THAT(parked, Catch::Contains(R"("jid":"B")"));
        CHECK_THAT(parked, Catch::Contains(R"("lock_wait_token":")" + wait_token + "\""));
        // C arrives while A runs and B waits: a duplicate (on_conflict log: dropped).
        CHECK_FALSE(f.run(payload("C")));
        CHECK(zrange(c, "schedule").size() == 1);
        // B comes back while A still runs: still waiting, same token, parked again.
        c.command({"ZREM", "schedule", parked});
        CHECK_FALSE(f.run(parked));
        CHECK(std::string(c.command({"GET", "uniquejobs:acct1:WAIT"}).str()) == wait_token);
        parked = zrange(c, "schedule").at(0);
        c.command({"ZREM", "schedule", parked});
    });
    CHECK(a_ran);
    CHECK_FALSE(key_exists(c, "uniquejobs:acct1:EXEC"));  // released after the run
    CHECK(key_exists(c, "uniquejobs:acct1:WAIT"));        // B still waits
    // A new copy D now finds B waiting: a duplicate, even though nothing runs.
    CHECK_FALSE(f.run(payload("D")));
    CHECK(zrange(c, "schedule").empty());
    // B runs as the wait-lock holder and gives the wait lock up.
    CHECK(f.run(parked, [&] { CHECK_FALSE(key_exists(c, "uniquejobs:acct1:WAIT")); }));
    CHECK(c.command({"KEYS", "uniquejobs:acct1*"}).size() == 0);
    CHECK(held_lock_count(c) == 0);
    CHECK(f.keeper.held() == 0);
}

TEST_CASE("unique: a deferred release runs inside the next job's acquire, before it", "[unique]") {
    auto& server = RedisServer::shared();
    server.flushall();
    UniqueFixture f(server);
    auto& c = f.conn;
    // As a processor thread with batched fetch: the releases wait in after_job for the next
    // job's first round trip.
    std::vector<redis::Command> pending;
    auto run = [&](const std::string& raw, const std::function<void()>& body) {
        return kiqd::test::run_through(f.t, c, f.unique, raw, body, nullptr, &pending);
    };
    const std::string other =
        R"({"class":"Sync","queue":"default","args":["acct-2"],"jid":"O","lock":"while_executing","lock_digest":"uniquejobs:acct2"})";
    CHECK(run(payload("A", "while_executing"), [] {}));
    REQUIRE(pending.size() == 1);  // A's release, not sent yet
    CHECK(key_exists(c, "uniquejobs:acct1:EXEC"));
    CHECK(held_lock_count(c) == 1);
    // The per-job acquire wrote the held hash's marker with the lock: a hashtable already.
    CHECK(std::string(c.command({"OBJECT", "ENCODING", "kiqd:unique:held"}).str()) == "hashtable");
    c.command({"CONFIG", "RESETSTAT"});
    // Another identity: its acquire call frees A's lock first.
    CHECK(run(other, [&] {
        CHECK(pending.empty());  // taken into the acquire call
        CHECK_FALSE(key_exists(c, "uniquejobs:acct1:EXEC"));
        CHECK(key_exists(c, "uniquejobs:acct2:EXEC"));
        CHECK(held_lock_count(c) == 1);
    }));
    REQUIRE(pending.size() == 1);
    CHECK(command_calls(c, "evalsha") == 1);  // one script call for the release and the acquire
    // The same identity again: the release comes first, so the lock is free for it (with the
    // release after the acquire it would find its own predecessor's lock busy).
    CHECK(run(
        R"({"class":"Sync","queue":"default","args":["acct-2"],"jid":"P","lock":"while_executing","lock_digest":"uniquejobs:acct2"})",
        [&] { CHECK(key_exists(c, "uniquejobs:acct2:EXEC")); }));
    CHECK(zrange(c, "dead").empty());  // not a duplicate
    // A release that Redis refuses (EXEC of another type) is ignored there, as it is when sent
    // on its own: the next job still runs.
    REQUIRE(pending.size() == 1);
    c.command({"DEL", "uniquejobs:acct2:EXEC"});
    c.command({"LPUSH", "uniquejobs:acct2:EXEC", "x"});
    CHECK(run(payload("B", "while_executing"), [&] {
        CHECK(key_exists(c, "uniquejobs:acct1:EXEC"));
        CHECK(held_lock_count(c) == 1);  // B's alone
    }));
    c.command({"DEL", "uniquejobs:acct2:EXEC"});
    REQUIRE(pending.size() == 1);
    c.command(pending.back());
    CHECK_FALSE(key_exists(c, "uniquejobs:acct1:EXEC"));
    CHECK(held_lock_count(c) == 0);
    CHECK(f.keeper.held() == 0);
}

TEST_CASE("unique: a failing job releases its lock; tokens protect other owners' locks",
          "[unique]") {
    auto& server = RedisServer::shared();
    server.flushall();
    UniqueFixture f(server);
    auto& c = f.conn;
    CHECK_THROWS_AS(f.run(payload("A"), [] { throw JobError("Boom", "failed"); }), JobError);
    CHECK_FALSE(key_exists(c, "uniquejobs:acct1:EXEC"));
    CHECK(f.keeper.held() == 0);
    // The retry (same jid) contends like a new copy and runs.
    CHECK(f.run(payload("A")));

    // An expired-and-retaken lock is never freed by the old owner.
    f.run(payload("E"), [&] {
        c.command({"SET", "uniquejobs:acct1:EXEC", "otherhost:9:ffffffffffff tok"});
    });
    CHECK(std::string(c.command({"GET", "uniquejobs:acct1:EXEC"}).str()) ==
          "otherhost:9:ffffffffffff tok");
}

TEST_CASE("unique: while_executing rejects a busy copy to the dead set by default", "[unique]") {
    auto& server = RedisServer::shared();
    server.flushall();
    UniqueFixture f(server);
    auto& c = f.conn;
    CHECK(f.run(payload("A", "while_executing"),
                [&] { CHECK_FALSE(f.run(payload("B", "while_executing"))); }));
    auto dead = zrange(c, "dead");
    REQUIRE(dead.size() == 1);
    auto entry = nlohmann::json::parse(dead[0]);
    CHECK(entry["jid"] == "B");
    CHECK(entry["error_class"] == "Kiqd::UniqueConflict");
    CHECK_THAT(entry["error_message"].get<std::string>(), Catch::Contains("uniquejobs:acct1"));
    // With lock_timeout the busy copy waits (parked) instead.
    CHECK(f.run(payload("A2", "while_executing"), [&] {
        CHECK_FALSE(f.run(payload("B2", "while_executing", R"(,"lock_timeout":30)")));
    }));
    CHECK(zrange(c, "schedule").size() == 1);
    CHECK(zrange(c, "dead").size() == 1);
}

TEST_CASE("unique: the gem's client lock is released when the gem's server would release it",
          "[unique]") {
    auto& server = RedisServer::shared();
    server.flushall();
    UniqueFixture f(server);
    auto& c = f.conn;
    // What sidekiq-unique-jobs' client leaves behind after pushing jid J (its lock.lua).
    auto client_lock = [&](const std::string& jid) {
        c.command({"SET", "uniquejobs:acct1", jid});
        c.command({"HSET", "uniquejobs:acct1:LOCKED", jid, "1700000000.0"});
        c.command({"ZADD", "uniquejobs:digests", "1700000000", "uniquejobs:acct1"});
    };
    auto client_locked = [&] { return key_exists(c, "uniquejobs:acct1:LOCKED"); };

    client_lock("J1");  // until_executing: released before the run
    CHECK(f.run(payload("J1", "until_executing"), [&] { CHECK_FALSE(client_locked()); }));
    client_lock("J2");  // until_executed: held during the run, released after it
    CHECK(f.run(payload("J2", "until_executed"), [&] { CHECK(client_locked()); }));
    CHECK_FALSE(client_locked());
    CHECK(c.command({"ZSCORE", "uniquejobs:digests", "uniquejobs:acct1"}).is_nil());
    client_lock("J3");  // a failure keeps it through the retry (gem 8), which runs and frees it
    CHECK_THROWS(f.run(payload("J3", "until_executed"), [] { throw std::runtime_error("x"); }));
    CHECK(client_locked());
    CHECK(f.run(payload("J3", "until_executed", R"(,"retry_count":0)")));
    CHECK_FALSE(client_locked());
    client_lock("J4");  // until_expired: never released by the server
    CHECK(f.run(payload("J4", "until_expired")));
    CHECK(client_locked());
    c.command({"DEL", "uniquejobs:acct1", "uniquejobs:acct1:LOCKED"});
    client_lock("J5");  // until_and_while_executing: released when the run starts
    CHECK(f.run(payload("J5"), [&] {
        CHECK_FALSE(client_locked());
        CHECK(key_exists(c, "uniquejobs:acct1:EXEC"));
    }));
    // Another jid's client lock is not ours to release.
    client_lock("OTHER");
    CHECK(f.run(payload("J6", "until_executing")));
    CHECK(client_locked());
    // until_executed without the lock while another jid holds it: that jid runs later, this
    // copy is a duplicate; with the lock free it takes it for its run.
    CHECK_FALSE(f.run(payload("J7", "until_executed")));
    c.command({"DEL", "uniquejobs:acct1", "uniquejobs:acct1:LOCKED", "uniquejobs:digests"});
    CHECK(f.run(payload("J8", "until_executed"), [&] {
        CHECK(std::string(c.command({"GET", "uniquejobs:acct1"}).str()) == "J8");
        CHECK(client_locked());
    }));
    CHECK_FALSE(client_locked());
    CHECK(zcard(c, "uniquejobs:digests") == 0);
}

namespace {

[[noreturn]] void boom() {
    throw JobError("Boom", "failed");
}

}  // namespace

TEST_CASE(
    "unique: until_and_while_executing frees the client lock before the run lock — copies "
    "pushed during a run leave no client lock behind",
    "[unique]") {
    auto& server = RedisServer::shared();
    server.flushall();
    UniqueFixture f(server);
    auto& c = f.conn;
    // The gem's default options in every payload: lock_timeout 0, lock_ttl null.
    const std::string gem = R"(,"lock_timeout":0,"lock_ttl":null)";
    gem_client_lock(c, "A");
    CHECK(f.run(payload("A", "until_and_while_executing", gem), [&] {
        CHECK(lock_holders(c).empty());  // freed before the run: the gem accepts the next push
        gem_client_lock(c, "B");
        CHECK_FALSE(f.run(payload("B", "until_and_while_executing", gem)));  // waits (parked)
        CHECK(lock_holders(c).empty());
        CHECK(zcard(c, "uniquejobs:digests") == 0);
        gem_client_lock(c, "C");
        CHECK_FALSE(f.run(payload("C", "until_and_while_executing", gem)));  // B waits: dropped
        CHECK(lock_holders(c).empty());
        CHECK_FALSE(key_exists(c, "uniquejobs:acct1"));
    }));
    auto parked = zrange(c, "schedule");
    REQUIRE(parked.size() == 1);  // B, whatever lock_timeout 0 says: the update is not lost
    c.command({"DEL", "schedule"});
    CHECK(f.run(parked[0]));
    // Only the gem's 5 s wake-up token is left.
    auto left = c.command({"KEYS", "uniquejobs:*"});
    REQUIRE(left.size() == 1);
    CHECK(std::string(left[0].str()) == "uniquejobs:acct1:QUEUED");
    const long long queued_pttl = c.command({"PTTL", "uniquejobs:acct1:QUEUED"}).integer();
    CHECK(queued_pttl > 0);  // -1 (no TTL) and -2 (no key) would pass the bound alone
    CHECK(queued_pttl <= 5000);
}

TEST_CASE(
    "unique: on_conflict reschedule — the waiting copy holds the gem's client lock through to "
    "its run; other copies are dropped",
    "[unique]") {
    auto& server = RedisServer::shared();
    server.flushall();
    UniqueFixture f(server);
    auto& c = f.conn;
    const std::string gem =
        R"(,"lock_timeout":0,"lock_ttl":null,"on_conflict":{"server":"reschedule"})";
    auto parked_copy = [&] {
        auto scheduled = zrange(c, "schedule");
        REQUIRE(scheduled.size() == 1);
        c.command({"ZREM", "schedule", scheduled[0]});
        return scheduled[0];
    };
    std::string parked;
    gem_client_lock(c, "A");
    CHECK(f.run(payload("A", "until_and_while_executing", gem), [&] {
        CHECK(lock_holders(c).empty());
        gem_client_lock(c, "B");
        CHECK_FALSE(f.run(payload("B", "until_and_while_executing", gem)));  // waits
        // It waits holding the client lock: the gem's client rejects the next pushes.
        CHECK(lock_holders(c) == std::vector<std::string>{"B"});
        CHECK(std::string(c.command({"GET", "uniquejobs:acct1"}).str()) == "B");
        CHECK_FALSE(c.command({"ZSCORE", "uniquejobs:digests", "uniquejobs:acct1"}).is_nil());
        // Back while A still runs: waits again, still holding it.
        CHECK_FALSE(f.run(parked_copy()));
        CHECK(lock_holders(c) == std::vector<std::string>{"B"});
        // A copy pushed past the gem's client while B holds the lock: a duplicate, dropped.
        CHECK_FALSE(f.run(payload("C", "until_and_while_executing", gem)));
        CHECK(lock_holders(c) == std::vector<std::string>{"B"});
        parked = parked_copy();
    }));
    // B keeps the lock through to its run, which releases it as the gem's server does.
    CHECK(lock_holders(c) == std::vector<std::string>{"B"});
    CHECK(f.run(parked, [&] { CHECK(lock_holders(c).empty()); }));
    CHECK(zcard(c, "schedule") == 0);
    CHECK(zcard(c, "uniquejobs:digests") == 0);
    CHECK(c.command({"KEYS", "uniquejobs:acct1*"}).size() == 1);  // the gem's 5 s wake-up token

    // A waiting copy whose lock_timeout ran out is rescheduled 5 s ahead as a new arrival (no
    // wait token), still holding the lock.
    c.command({"FLUSHALL"});
    const std::string timed = R"(,"lock_timeout":1,"on_conflict":{"server":"reschedule"})";
    gem_client_lock(c, "A");
    CHECK(f.run(payload("A", "until_and_while_executing", timed), [&] {
        gem_client_lock(c, "B");
        CHECK_FALSE(f.run(payload("B", "until_and_while_executing", timed)));
        auto obj = RawJsonObject::parse(parked_copy());
        REQUIRE(obj);
        obj->set("lock_wait_since", std::to_string(epoch_seconds() - 10));
        CHECK_FALSE(f.run(obj->dump()));
        auto again = zrange(c, "schedule");
        REQUIRE(again.size() == 1);
        CHECK_THAT(again[0], !Catch::Contains("lock_wait_token"));
        CHECK(std::stod(std::string(c.command({"ZSCORE", "schedule", again[0]}).str())) >
              epoch_seconds() + 3);
        CHECK(lock_holders(c) == std::vector<std::string>{"B"});
        CHECK_FALSE(key_exists(c, "uniquejobs:acct1:WAIT"));
    }));

    // Without the gem's client lock (kiqd's own digest): one copy waits, the next copy is
    // dropped instead of coming back every 5 s.
    c.command({"FLUSHALL"});
    const std::string own =
        R"({"class":"Sync","queue":"default","args":["acct-9"],"lock":"until_and_while_executing","on_conflict":"reschedule","jid":")";
    CHECK(f.run(own + "A\"}", [&] {
        CHECK_FALSE(f.run(own + "B\"}"));
        CHECK_FALSE(f.run(own + "C\"}"));
        auto waiting = zrange(c, "schedule");
        REQUIRE(waiting.size() == 1);
        CHECK_THAT(waiting[0], Catch::Contains(R"("jid":"B")"));
    }));
    CHECK(zcard(c, "dead") == 0);
}

TEST_CASE(
    "unique: after a failure the client lock is taken again for the retry; the retry path "
    "leaves nothing stuck",
    "[unique]") {
    auto& server = RedisServer::shared();
    server.flushall();
    UniqueFixture f(server);
    auto& c = f.conn;
    for (const std::string type : {"until_and_while_executing", "until_executing"}) {
        INFO(type);
        c.command({"FLUSHALL"});
        gem_client_lock(c, "A");
        CHECK_THROWS(f.run(payload("A", type), boom));
        // A waits for its retry holding the lock: the gem's client rejects duplicates.
        CHECK(lock_holders(c) == std::vector<std::string>{"A"});
        CHECK(c.command({"ZSCORE", "uniquejobs:digests", "uniquejobs:acct1"}).is_nil() == false);
        CHECK(f.run(payload("A", type, R"(,"retry_count":0)")));
        CHECK(lock_holders(c).empty());
        CHECK(zcard(c, "uniquejobs:digests") == 0);
    }
    // The sequence: A fails while B (pushed during A's run) holds the lock; B runs; C is
    // pushed; A's retry arrives while C holds the lock: a duplicate of C, which runs later.
    c.command({"FLUSHALL"});
    gem_client_lock(c, "A");
    CHECK_THROWS(f.run(payload("A"), [&] {
        gem_client_lock(c, "B");
        boom();
    }));
    CHECK(lock_holders(c) == std::vector<std::string>{"B"});
    CHECK(f.run(payload("B")));
    gem_client_lock(c, "C");
    CHECK_FALSE(f.run(payload("A", "until_and_while_executing", R"(,"retry_count":0)")));
    CHECK(lock_holders(c) == std::vector<std::string>{"C"});
    CHECK(f.run(payload("C")));
    CHECK(lock_holders(c).empty());
    CHECK(zcard(c, "uniquejobs:digests") == 0);
    // A's retry with nobody holding the lock runs (kiqd's scheduler has no client middleware).
    CHECK(f.run(payload("A", "until_and_while_executing", R"(,"retry_count":0)")));
    CHECK(zcard(c, "uniquejobs:digests") == 0);
}

TEST_CASE(
    "unique: a job that dies frees its identity (the gem's death handler); retry: false "
    "leaves no lock",
    "[unique]") {
    auto& server = RedisServer::shared();
    server.flushall();
    UniqueFixture f(server);
    auto& c = f.conn;
    for (const std::string type :
         {"until_and_while_executing", "until_executed", "until_executing"}) {
        INFO(type);
        c.command({"FLUSHALL"});
        gem_client_lock(c, "A");
        CHECK_THROWS(f.run(payload("A", type, R"(,"retry":2,"retry_count":1)"), boom));
        CHECK(c.command({"KEYS", "uniquejobs:acct1*"}).size() == 0);
        CHECK(zcard(c, "uniquejobs:digests") == 0);
        gem_client_lock(c, "B");
        CHECK_THROWS(f.run(payload("B", type, R"(,"retry":false)"), boom));
        CHECK(lock_holders(c).empty());
    }
}

TEST_CASE("unique: the keeper extends running locks and reaps those of dead processes",
          "[unique]") {
    auto& server = RedisServer::shared();
    server.flushall();
    UniqueFixture f(server);
    auto& c = f.conn;
    CHECK(f.run(payload("A", "while_executing", R"(,"lock_ttl":5)"), [&] {
        c.command({"PEXPIRE", "uniquejobs:acct1:EXEC", "1500"});
        CHECK(f.keeper.extend_due(c, true) == 1);
        CHECK(c.command({"PTTL", "uniquejobs:acct1:EXEC"}).integer() > 1500);
    }));
    // Locks whose owner has no live process record are reaped; live owners' are kept.
    c.command({"SET", "uniquejobs:x:EXEC", "deadhost:1:aaaaaaaaaaaa t1"});
    c.command({"SET", "uniquejobs:y:EXEC", "livehost:2:bbbbbbbbbbbb t2"});
    c.command({"HSET", "kiqd:unique:held", "uniquejobs:x:EXEC", "deadhost:1:aaaaaaaaaaaa t1",
               "uniquejobs:y:EXEC", "livehost:2:bbbbbbbbbbbb t2"});
    c.command({"HSET", "livehost:2:bbbbbbbbbbbb", "beat", "1"});
    CHECK(f.keeper.reap(c) == 1);
    CHECK_FALSE(key_exists(c, "uniquejobs:x:EXEC"));
    CHECK(key_exists(c, "uniquejobs:y:EXEC"));
    CHECK(held_lock_count(c) == 1);
    CHECK(f.keeper.reap(c) == 0);  // within the interval another pass does not run
}

TEST_CASE(
    "unique daemons: 3 processes × 5 threads, duplicates in bursts — no overlap, no lost "
    "update, at most one waiter",
    "[unique][daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    Client client(Keys{}, Compat::v6);
    const std::vector<std::string> ids{"a", "b", "c"};
    std::map<std::string, std::vector<double>> pushed;  // identity → push times
    auto burst = [&](int copies) {
        for (const auto& id : ids) {
            for (int i = 0; i < copies; ++i) {
                pushed[id].push_back(epoch_seconds());
                client.push(conn, {{"class", "Test::Record"},
                                   {"args", {0.05, id}},
                                   {"lock", "until_and_while_executing"},
                                   {"lock_args", {id}}});
            }
        }
    };
    burst(5);  // before any process runs
    const std::string yaml =
        kiqd::test::kiqd_config(server,
                                "concurrency: 5\nqueues: [default]\nlogging: {level: warn}\n"
                                "unique_jobs: {wait_interval: 0.1}\n");
    KiqdFleet fleet(KIQD_TEST_DAEMON, yaml, 3);

    // At most one parked copy per identity at any moment we look.
    size_t max_waiting = 0;
    auto sample_waiters = [&] {
        std::map<std::string, size_t> waiting;
        for (const auto& m : zrange(conn, "schedule")) {
            auto j = nlohmann::json::parse(m);
            if (j.contains("lock_wait_token")) ++waiting[j["args"][1].get<std::string>()];
        }
        for (const auto& [id, n] : waiting) max_waiting = std::max(max_waiting, n);
    };
    // Bursts during runs: each one once the previous burst's copies have started running.
    for (int round = 0; round < 6; ++round) {
        const auto ran_before = ran_count(conn);
        REQUIRE(wait_until(
            [&] {
                sample_waiters();
                return ran_count(conn) > ran_before;
            },
            std::chrono::seconds(30)));
        burst(3);
    }
    // Quiet at the end: nothing queued, parked or locked, and a run of each identity that
    // started after its last copy was pushed. The first four alone are not enough: the last
    // burst's 9 copies can all be popped by the 15 threads and not yet started, and on the stop
    // such copies go back to the queue unrun (as Sidekiq's do).
    auto ran_after_last_push = [&] {
        std::map<std::string, double> last_start;
        for (const auto& r : kiqd::test::ran_records(conn)) {
            double& t = last_start[r["args"][1].get<std::string>()];
            t = std::max(t, r["started"].get<double>());
        }
        return std::all_of(ids.begin(), ids.end(), [&](const std::string& id) {
            return last_start[id] >= pushed[id].back();
        });
    };
    REQUIRE(wait_until(
        [&] {
            sample_waiters();
            return kiqd::test::llen(conn, "queue:default") == 0 && zcard(conn, "schedule") == 0 &&
                   held_lock_count(conn) == 0 &&
                   conn.command({"KEYS", "uniquejobs:*"}).size() == 0 && ran_after_last_push();
        },
        std::chrono::seconds(60)));
    for (int status : fleet.stop()) CHECK(status == 0);

    std::map<std::string, std::vector<std::pair<double, double>>> runs;  // id → (start, end)
    auto ran = kiqd::test::ran_records(conn);
    for (auto& r : ran) {
        runs[r["args"][1].get<std::string>()].emplace_back(r["started"].get<double>(),
                                                           r["ended"].get<double>());
    }
    size_t pushes = 0;
    for (const auto& id : ids) {
        auto& rs = runs[id];
        std::sort(rs.begin(), rs.end());
        REQUIRE_FALSE(rs.empty());
        for (size_t i = 1; i < rs.size(); ++i) {
            INFO("identity " << id << " run " << i);
            CHECK(rs[i].first >= rs[i - 1].second);  // runs of one identity never overlap
        }
        for (double t : pushed[id]) {
            INFO("identity " << id << " copy pushed at " << std::fixed << t);
            CHECK(rs.back().first >= t);  // a run started after every copy was pushed
        }
        pushes += pushed[id].size();
    }
    CHECK(max_waiting <= 1);
    CHECK(ran.size() < pushes);  // duplicates were dropped, not all run
    CHECK(zcard(conn, "dead") == 0);
    std::printf("unique fleet test: %zu copies pushed, %zu runs, max waiters per identity %zu\n",
                pushes, static_cast<size_t>(ran.size()), max_waiting);
}

TEST_CASE("unique daemons: kill -9 of the lock holder — a later copy runs, nothing stays locked",
          "[unique][daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    Client client(Keys{}, Compat::v6);
    // lock_ttl 600: the lock cannot just expire; the reaper must free it once the owner's
    // process record is gone.
    auto push = [&](double seconds) {
        client.push(conn, {{"class", "Test::Record"},
                           {"args", {seconds, "k"}},
                           {"lock", "until_and_while_executing"},
                           {"lock_args", {"k"}},
                           {"lock_ttl", 600}});
    };
    const std::string yaml = kiqd::test::kiqd_config(
        server,
        "concurrency: 2\nqueues: [default]\nunique_jobs: {wait_interval: 0.1, "
        "reaper_interval: 1}\n");
    push(60);
    std::string owner;
    {
        KiqdProcess victim(KIQD_TEST_DAEMON, yaml);
        REQUIRE(wait_until([&] {
            auto held = held_locks(conn);
            if (held.size() != 1) return false;
            owner = held.begin()->second;
            return true;
        }));
        victim.signal(SIGKILL);
        CHECK(victim.wait_exit() == 128 + SIGKILL);
    }
    push(0);  // the copy that must not be lost
    // The victim's process record would expire within 60 s, its keeper's liveness key within
    // LockKeeper::kLivenessTtl; expire them now.
    const std::string victim_identity = LockKeeper::owner_identity(owner);
    conn.command({"DEL", victim_identity, "kiqd:unique:alive:" + victim_identity});
    KiqdProcess successor(KIQD_TEST_DAEMON, yaml);
    REQUIRE(wait_until([&] { return ran_count(conn) == 1; }, std::chrono::seconds(30)));
    REQUIRE(wait_until([&] {
        return conn.command({"KEYS", "uniquejobs:*"}).size() == 0 && held_lock_count(conn) == 0;
    }));
    CHECK(successor.stop() == 0);
    CHECK_THAT(successor.output(), Catch::Contains("is gone"));
}
