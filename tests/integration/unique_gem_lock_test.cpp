// Unique jobs pushed by sidekiq-unique-jobs' client (a payload with the gem's lock_digest and the
// gem's client lock in Redis), against a real Redis, driving the middleware in-process: such a
// job costs the script calls of a lock declared in kiqd's config, with no TYPE check per key,
// and a key of another type fails its acquire with nothing written.
#include <catch2/catch.hpp>
#include <string>

#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/unique_fixture.hpp"

using namespace kiqd;
using kiqd::test::command_calls;
using kiqd::test::gem_client_lock;
using kiqd::test::lock_holders;
using kiqd::test::RedisServer;
using kiqd::test::UniqueFixture;

namespace {

std::string gem_lock_job(const std::string& jid, int n, bool gem) {
    const std::string head = R"({"class":"Sync","queue":"default","args":[)" + std::to_string(n) +
                             R"(],"jid":")" + jid + R"(","lock":"until_and_while_executing")";
    if (!gem) return head + "}";
    return head + R"(,"lock_timeout":0,"lock_ttl":null,"lock_digest":"uniquejobs:d)" +
           std::to_string(n) + "\"}";
}

}  // namespace

TEST_CASE(
    "unique: a job the gem's client pushed costs the script calls of kiqd's own lock, with no "
    "TYPE check per key",
    "[unique]") {
    auto& server = RedisServer::shared();
    server.flushall();
    UniqueFixture f(server);
    auto& c = f.conn;
    constexpr int kJobs = 20;
    // As a processor thread: each release waits for the next job's acquire call.
    auto drain = [&](bool gem) {
        std::vector<redis::Command> pending;
        c.command({"CONFIG", "RESETSTAT"});
        for (int n = 0; n < kJobs; ++n) {
            const std::string jid = "J" + std::to_string(n);
            const std::string digest = "uniquejobs:d" + std::to_string(n);
            if (gem) gem_client_lock(c, jid, digest);
            CHECK(f.run(
                gem_lock_job(jid, n, gem),
                [&] {
                    // The gem's server frees the client lock before the run.
                    if (gem) CHECK(lock_holders(c, digest).empty());
                },
                &pending));
        }
        // The commands of the fixture's own gem_client_lock calls are not the middleware's.
        return std::pair{command_calls(c, "evalsha") + command_calls(c, "eval"),
                         command_calls(c, "type")};
    };
    const auto own = drain(false);
    const auto gem = drain(true);
    CHECK(own.first == kJobs);  // one acquire call per job, the previous release inside it
    CHECK(gem.first == own.first);
    CHECK(own.second == kJobs);  // the held hash's type, checked by the acquire
    CHECK(gem.second == 0);
    // The gem's state once each job ran: no digest, no lock, only its 5 s wake-up tokens.
    CHECK(c.command({"ZCARD", "uniquejobs:digests"}).integer() == 0);
    CHECK(c.command({"KEYS", "uniquejobs:d*:LOCKED"}).size() == 0);
    CHECK(c.command({"EXISTS", "uniquejobs:d1"}).integer() == 0);
    CHECK(c.command({"KEYS", "uniquejobs:d1:*"}).size() == 1);
}

TEST_CASE(
    "unique: a gem-pushed job whose client lock keys hold another type fails with nothing "
    "written",
    "[unique]") {
    auto& server = RedisServer::shared();
    server.flushall();
    UniqueFixture f(server);
    auto& c = f.conn;
    for (const std::string bad : {"uniquejobs:d1:LOCKED", "uniquejobs:d1:QUEUED",
                                  "uniquejobs:d1:PRIMED", "uniquejobs:d1:WAIT"}) {
        INFO(bad);
        c.command({"FLUSHALL"});
        gem_client_lock(c, "A", "uniquejobs:d1");
        if (bad.find("LOCKED") != std::string::npos) c.command({"DEL", bad});
        c.command({"SADD", bad, "x"});  // a set: no command the script makes takes it
        const auto before = c.command({"KEYS", "*"}).size();
        bool ran = false;
        CHECK_THROWS_WITH(f.run(gem_lock_job("A", 1, true), [&] { ran = true; }),
                          Catch::Contains("WRONGTYPE"));
        CHECK_FALSE(ran);
        CHECK(c.command({"EXISTS", "uniquejobs:d1:EXEC"}).integer() == 0);
        CHECK(c.command({"HLEN", "kiqd:unique:held"}).integer() == 0);
        CHECK(c.command({"KEYS", "*"}).size() == before);
        CHECK(std::string(c.command({"GET", "uniquejobs:d1"}).str()) == "A");
    }
    // The held hash of another type: its HSET is the first write, so nothing is written either.
    c.command({"FLUSHALL"});
    gem_client_lock(c, "A", "uniquejobs:d1");
    c.command({"SET", "kiqd:unique:held", "x"});
    CHECK_THROWS_WITH(f.run(gem_lock_job("A", 1, true)), Catch::Contains("WRONGTYPE"));
    CHECK(lock_holders(c, "uniquejobs:d1") == std::vector<std::string>{"A"});
    CHECK(c.command({"EXISTS", "uniquejobs:d1:EXEC"}).integer() == 0);
    // The digests ZSET of another type holds no entry to remove: the job runs.
    c.command({"FLUSHALL"});
    gem_client_lock(c, "A", "uniquejobs:d1");
    c.command({"DEL", "uniquejobs:digests"});
    c.command({"SET", "uniquejobs:digests", "x"});
    CHECK(f.run(gem_lock_job("A", 1, true)));
    CHECK(lock_holders(c, "uniquejobs:d1").empty());
}
