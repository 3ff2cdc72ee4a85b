// What a batched reliable refill acquires for jobs sidekiq-unique-jobs' client pushed
// (until_and_while_executing with the gem's lock_digest and client lock in Redis), against a
// real Redis, in-process (BatchAcquireFixture): the refill takes their run locks and releases
// their client locks in its one script call, exactly where the per-job acquire would have run
// them; a copy it cannot decide for (another jid holds the client lock, a copy waits, a key of
// another type) gets nothing and its middleware decides as before; a copy given back unstarted
// holds its client lock again.
#include <catch2/catch.hpp>
#include <string>

#include "support/batch_acquire_fixture.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/unique_fixture.hpp"

using namespace kiqd;
using kiqd::test::command_calls;
using kiqd::test::gem_client_lock;
using kiqd::test::held_lock_count;
using kiqd::test::llen;
using kiqd::test::lock_holders;
using kiqd::test::RedisServer;
using kiqd::test::zcard;

namespace {

using Fixture = kiqd::test::BatchAcquireFixture;

// As the gem 8.1's client pushes it: its lock options and digest in the payload. The class is
// configured nowhere in kiqd.
std::string gem_job(const std::string& jid, const std::string& digest) {
    return R"({"class":"GemSync","queue":"default","args":[")" + jid + R"("],"jid":")" + jid +
           R"(","lock":"until_and_while_executing","lock_timeout":0,"lock_ttl":null,)"
           R"("lock_digest":")" +
           digest + R"("})";
}

// Pushes the gem's jobs with their client locks held by `holder` (by default, each job's jid).
void push_gem(Fixture& f, const std::vector<std::pair<std::string, std::string>>& jobs) {
    for (const auto& [jid, holder] : jobs) {
        const std::string digest = "uniquejobs:" + jid;
        gem_client_lock(f.conn, holder, digest);
        f.conn.command({"LPUSH", "queue:default", gem_job(jid, digest)});
    }
}

}  // namespace

TEST_CASE(
    "batch acquire: the gem's until_and_while_executing jobs take their run locks and give up "
    "their client locks in the refill's call; a duplicate is left to its middleware",
    "[batch_acquire][unique][batch][fetch][gem]") {
    auto& server = RedisServer::shared();
    server.flushall();
    Fixture f(server);
    // G4's client lock is held by another jid: G4 is a duplicate (the holder runs later).
    push_gem(f, {{"G1", "G1"}, {"G2", "G2"}, {"G3", "G3"}, {"G4", "OTHER"}});
    auto units = f.take_all(4);
    CHECK(f.acquired(units, Acquired::Kind::exec_lock) == 3);
    CHECK(!units[3].acquired);
    CHECK(held_lock_count(f.conn) == 3);
    // Released as the gem's server releases them at the start: no holder, no digest left but
    // the duplicate's, and the gem's wake-up token pushed.
    for (const std::string jid : {"G1", "G2", "G3"}) {
        INFO(jid);
        const std::string digest = "uniquejobs:" + jid;
        CHECK(lock_holders(f.conn, digest).empty());
        CHECK(f.conn.command({"EXISTS", digest}).integer() == 0);
        CHECK(kiqd::test::lrange(f.conn, digest + ":QUEUED") == std::vector<std::string>{"1"});
        CHECK(f.conn.command({"EXISTS", digest + ":EXEC"}).integer() == 1);
    }
    CHECK(kiqd::test::zrange(f.conn, "uniquejobs:digests") ==
          std::vector<std::string>{"uniquejobs:G4"});
    CHECK(lock_holders(f.conn, "uniquejobs:G4") == std::vector<std::string>{"OTHER"});

    // Their middlewares run them on what the refill took: no script call of their own.
    std::vector<redis::Command> after_job, after_refill;
    f.conn.command({"CONFIG", "RESETSTAT"});
    for (size_t i = 0; i < 3; ++i)
        CHECK(f.run(*f.unique, units[i], after_job, after_refill,
                    [&] { CHECK(f.locks.held() == 3 - i); }));
    CHECK(command_calls(f.conn, "evalsha") + command_calls(f.conn, "eval") == 0);
    CHECK(after_refill.size() == 3);  // the releases, for the next refill
    CHECK(held_lock_count(f.conn) == 3);
    // G4 decides on its own, as without batching: dropped, the holder's lock untouched.
    CHECK_FALSE(f.run(*f.unique, units[3], after_job, after_refill, [] {}));
    CHECK(lock_holders(f.conn, "uniquejobs:G4") == std::vector<std::string>{"OTHER"});
    CHECK(f.conn.command({"EXISTS", "uniquejobs:G4:EXEC"}).integer() == 0);
    for (const auto& c : after_refill) f.conn.command(c);
    CHECK(held_lock_count(f.conn) == 0);
    CHECK(f.conn.command({"KEYS", "*:EXEC"}).size() == 0);
}

TEST_CASE(
    "batch acquire: a gem job whose copy waits, or whose client lock key holds another type, "
    "takes nothing; the items around it are taken",
    "[batch_acquire][unique][batch][fetch][gem]") {
    auto& server = RedisServer::shared();
    server.flushall();
    Fixture f(server);
    push_gem(f, {{"W1", "W1"}, {"T1", "T1"}, {"P1", "P1"}, {"N1", "N1"}});
    f.conn.command({"SET", "uniquejobs:W1:WAIT", "a-waiting-copy"});
    f.conn.command({"SADD", "uniquejobs:T1:QUEUED", "x"});  // a set: LLEN fails on it
    f.conn.command({"SADD", "uniquejobs:P1:PRIMED", "x"});
    auto units = f.take_all(4);
    CHECK(f.acquired(units, Acquired::Kind::exec_lock) == 1);
    CHECK(!units[0].acquired);
    CHECK(!units[1].acquired);
    CHECK(!units[2].acquired);
    REQUIRE(units[3].acquired);
    // Nothing written for the three: their client locks as they were.
    for (const std::string jid : {"W1", "T1", "P1"}) {
        INFO(jid);
        CHECK(lock_holders(f.conn, "uniquejobs:" + jid) == std::vector<std::string>{jid});
        CHECK(f.conn.command({"EXISTS", "uniquejobs:" + jid + ":EXEC"}).integer() == 0);
    }
    // N1's client lock was released, its run lock taken.
    CHECK(lock_holders(f.conn, "uniquejobs:N1").empty());
    CHECK(f.conn.command({"EXISTS", "uniquejobs:N1"}).integer() == 0);
    CHECK(f.conn.command({"EXISTS", "uniquejobs:N1:EXEC"}).integer() == 1);
    // Their middlewares decide as before: the waiting copy's duplicate is dropped, the keys of
    // another type fail the job.
    std::vector<redis::Command> after_job, after_refill;
    CHECK_FALSE(f.run(*f.unique, units[0], after_job, after_refill, [] {}));
    CHECK_THROWS_WITH(f.run(*f.unique, units[1], after_job, after_refill, [] {}),
                      Catch::Contains("WRONGTYPE"));
    CHECK_THROWS_WITH(f.run(*f.unique, units[2], after_job, after_refill, [] {}),
                      Catch::Contains("WRONGTYPE"));
    CHECK(f.run(*f.unique, units[3], after_job, after_refill, [] {}));
}

TEST_CASE(
    "batch acquire: gem jobs given back before they start hold their client locks again, so "
    "the gem's client goes on rejecting their duplicates",
    "[batch_acquire][unique][batch][fetch][gem]") {
    auto& server = RedisServer::shared();
    server.flushall();
    Fixture f(server);
    push_gem(f, {{"S1", "S1"}, {"S2", "S2"}});
    std::mt19937_64 rng(1);
    auto first = f.t.fetcher.retrieve_work(f.conn, rng, 0);  // the refill brought both
    REQUIRE(first);
    CHECK(held_lock_count(f.conn) == 2);
    CHECK(zcard(f.conn, "uniquejobs:digests") == 0);
    // A stop: the buffered job goes back and so does the one taken but not started.
    f.conn.pipeline(f.t.fetcher.release_commands());
    f.conn.pipeline(f.t.fetcher.requeue_commands({*first}));
    CHECK(llen(f.conn, "queue:default") == 2);
    CHECK(held_lock_count(f.conn) == 0);
    CHECK(f.conn.command({"KEYS", "*:EXEC"}).size() == 0);
    for (const std::string jid : {"S1", "S2"}) {
        INFO(jid);
        CHECK(lock_holders(f.conn, "uniquejobs:" + jid) == std::vector<std::string>{jid});
        CHECK(std::string(f.conn.command({"GET", "uniquejobs:" + jid}).str()) == jid);
    }
    CHECK(zcard(f.conn, "uniquejobs:digests") == 2);
}
