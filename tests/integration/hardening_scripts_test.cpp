// Hardening [hardening][scripts]: Redis does not roll back a Lua script that fails half-way — the
// writes before the failing command stay. A script that takes a job from one key (ZREM, LPOP,
// RPOP) and then writes it to a key holding another type (WRONGTYPE) used to lose the job.
// Every script now checks the types of the keys it writes before its first write
// (redis/lua_type_guard.hpp). Each case makes a destination key the wrong type on a real Redis
// and checks that the job is still where it was, and that kiqd says why.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <random>

#include "kiqd/keys.hpp"
#include "kiqd/redis/script.hpp"
#include "kiqd_cli.hpp"
#include "middleware/limits/concurrency_scripts.hpp"
#include "middleware/pause/pause_control.hpp"
#include "redis/transaction.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/test_runtime.hpp"
#include "support/wait_until.hpp"

using kiqd::test::kiqd_binary;
using kiqd::test::KiqdProcess;
using kiqd::test::llen;
using kiqd::test::lrange;
using kiqd::test::occurrences;
using kiqd::test::RedisServer;
using kiqd::test::run_command;
using kiqd::test::TestRuntime;
using kiqd::test::wait_until;
using kiqd::test::zcard;

namespace {

std::string script_job(const std::string& jid, const std::string& queue) {
    return nlohmann::json{{"class", "Kiqd::Noop"},
                          {"args", nlohmann::json::array()},
                          {"jid", jid},
                          {"queue", queue},
                          {"retry", 3},
                          {"retry_count", 1}}
        .dump();
}

std::string past() {
    return std::to_string(static_cast<double>(std::time(nullptr)) - 60);
}

}  // namespace

TEST_CASE("scripts: a due job whose queue key is not a list stays due; one error says why",
          "[hardening][scripts]") {
    RedisServer redis;
    auto c = redis.connect();
    c.command({"SET", "queue:default", "an application's string"});
    c.command({"ZADD", "retry", past(), script_job("from-retry", "default")});
    c.command({"ZADD", "schedule", past(), script_job("from-schedule", "default")});
    KiqdProcess kiqd(kiqd_binary(),
                     kiqd::test::kiqd_config(redis, "queues: [other]\nconcurrency: 1\n"));
    const std::string refusal = "Redis refused to enqueue";
    // Before the fix the jobs left both sets and went nowhere.
    REQUIRE(wait_until([&] {
        return kiqd.output().find(refusal) != std::string::npos ||
               zcard(c, "retry") + zcard(c, "schedule") < 2;
    }));
    CHECK(zcard(c, "retry") == 1);
    CHECK(zcard(c, "schedule") == 1);
    CHECK(kiqd.output().find("WRONGTYPE queue:default holds a string, not a list") !=
          std::string::npos);
    // Later polls leave them too, without a second error line: a job due for another queue is
    // moved by a poll that runs after the error was logged.
    c.command({"ZADD", "schedule", past(), script_job("other", "other")});
    REQUIRE(wait_until([&] { return zcard(c, "schedule") == 1 && llen(c, "queue:other") == 0; }));
    CHECK(zcard(c, "retry") == 1);
    CHECK(occurrences(kiqd.output(), refusal) == 1);
    // Once the key is a list again, both move.
    c.command({"DEL", "queue:default"});
    REQUIRE(wait_until([&] { return llen(c, "queue:default") == 2; }));
    CHECK(zcard(c, "retry") + zcard(c, "schedule") == 0);
    CHECK(kiqd.wait_for_output("no longer held up"));  // info lines reach the file within 1 s
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("scripts: kiqd retries retry leaves an entry whose queue key is not a list",
          "[hardening][scripts]") {
    RedisServer redis;
    auto c = redis.connect();
    c.command({"HSET", "queue:default", "field", "value"});
    c.command({"ZADD", "retry", std::to_string(std::time(nullptr) + 3600),
               script_job("stuck", "default")});
    auto [status, output] =
        run_command({kiqd_binary(), "retries", "retry", "--all"}, {{"REDIS_URL", redis.url()}});
    INFO(output);
    CHECK(status == 69);
    CHECK(output.find("WRONGTYPE queue:default holds a hash") != std::string::npos);
    CHECK(zcard(c, "retry") == 1);
    c.command({"DEL", "queue:default"});
    std::tie(status, output) =
        run_command({kiqd_binary(), "retries", "retry", "--all"}, {{"REDIS_URL", redis.url()}});
    CHECK(status == 0);
    CHECK(zcard(c, "retry") == 0);
    CHECK(llen(c, "queue:default") == 1);
}

TEST_CASE("scripts: a batched basic fetch takes nothing when one of its queues is not a list",
          "[hardening][scripts]") {
    auto& redis = RedisServer::shared();
    redis.flushall();
    TestRuntime t(redis, {{"a", 0}, {"b", 0}}, 1, kiqd::FetchMode::basic, 10);
    auto c = redis.connect();
    for (const char* jid : {"a1", "a2", "a3"})
        c.command({"LPUSH", "queue:a", script_job(jid, "a")});
    c.command({"SET", "queue:b", "not a list"});
    std::mt19937_64 rng(7);
    // The fetch pops the three jobs of `a`, then meets `b`: before the fix the script failed
    // there, after its pops, and the three jobs were gone.
    for (int attempt = 0; attempt < 5; ++attempt)
        CHECK_THROWS_WITH(t.fetcher.retrieve_work(c, rng, 0), Catch::Contains("WRONGTYPE"));
    CHECK(llen(c, "queue:a") == 3);
    c.command({"DEL", "queue:b"});
    for (int i = 0; i < 3; ++i) CHECK(t.fetcher.retrieve_work(c, rng, 0).has_value());
}

TEST_CASE("scripts: resuming a paused worker leaves its jobs parked when a queue is not a list",
          "[hardening][scripts]") {
    auto& redis = RedisServer::shared();
    redis.flushall();
    auto c = redis.connect();
    const kiqd::Keys keys;
    const kiqd::ParkedJobs parked(keys, kiqd::Compat::v7);
    parked.park(c, "Kiqd::Noop", script_job("p1", "mail"), "manual", nullptr);
    parked.park(c, "Kiqd::Noop", script_job("p2", "default"), "manual", nullptr);
    c.command({"SET", "queue:mail", "not a list"});
    const std::string zset = keys.parked_jobs(kiqd::pause_control_worker_name("Kiqd::Noop"));
    CHECK_THROWS_WITH(parked.resume_batch(c, "Kiqd::Noop", 10), Catch::Contains("WRONGTYPE"));
    CHECK(zcard(c, zset) == 2);
    CHECK(llen(c, "queue:default") == 0);
    c.command({"DEL", "queue:mail"});
    CHECK(parked.resume_batch(c, "Kiqd::Noop", 10).moved == 2);
    CHECK(llen(c, "queue:mail") == 1);
}

TEST_CASE("scripts: a concurrency slot's release leaves parked jobs when a queue is not a list",
          "[hardening][scripts]") {
    auto& redis = RedisServer::shared();
    redis.flushall();
    auto c = redis.connect();
    const std::string slots = "kiqd:concurrency:s:slots", waiting = "kiqd:concurrency:s:waiting";
    c.command({"RPUSH", waiting, script_job("w1", "mail")});
    c.command({"SET", "queue:mail", "not a list"});
    auto release = [&] {
        return c.command({"EVAL", kiqd::concurrency_release_script(), "2", slots, waiting, "me|x|1",
                          "1", "60000", ""});
    };
    CHECK_THROWS_WITH(release(), Catch::Contains("WRONGTYPE"));
    CHECK(lrange(c, waiting).size() == 1);
    c.command({"DEL", "queue:mail"});
    CHECK(release().integer() == 1);
    CHECK(llen(c, "queue:mail") == 1);
}

// The same defect with MULTI/EXEC: a command that fails inside a transaction does not undo the
// others. With reliable fetch, a failing job's outcome went out as MULTI { ZADD retry; LREM
// working } EXEC: with `retry` holding a string the ZADD failed, the LREM still acknowledged the
// job, and it was gone while the log said "retry scheduled". Outcomes, requeues and the moves of
// pause and throttle now go through redis::in_transaction, a type-checked script.
TEST_CASE("transaction: every command lands, or none when one key has the wrong type",
          "[hardening][scripts][multi]") {
    auto& redis = RedisServer::shared();
    redis.flushall();
    auto c = redis.connect();
    auto batch = [&](std::vector<kiqd::redis::Command> body) {
        return c.pipeline(kiqd::redis::in_transaction(std::move(body)));
    };
    c.command({"RPUSH", "working", "job"});
    auto replies = batch({{"ZADD", "retry", "1", "job"},
                          {"LREM", "working", "1", "job"},
                          {"INCRBY", "stat:failed", "1"},
                          {"EXPIRE", "stat:failed", "60"}});
    REQUIRE(replies.size() == 1);
    REQUIRE(replies[0].size() == 4);
    CHECK(replies[0][1].integer() == 1);
    CHECK(zcard(c, "retry") == 1);
    CHECK(llen(c, "working") == 0);

    c.command({"RPUSH", "working", "job2"});
    c.command({"SET", "dead", "a string"});
    CHECK_THROWS_WITH(batch({{"ZADD", "dead", "1", "job2"}, {"LREM", "working", "1", "job2"}}),
                      Catch::Contains("WRONGTYPE dead holds a string, not a zset"));
    CHECK(llen(c, "working") == 1);  // not acknowledged: nothing was written

    c.command({"SET", "stat:failed", "not a number"});
    CHECK_THROWS_WITH(batch({{"LREM", "working", "1", "job2"}, {"INCRBY", "stat:failed", "1"}}),
                      Catch::Contains("stat:failed does not hold an integer"));
    CHECK(llen(c, "working") == 1);

    // Payload bytes of any kind pass through ARGV untouched.
    const std::string odd("\0\xff\r\n 3 ZADD", 11);
    batch({{"RPUSH", "odd", odd}, {"RPUSH", "odd", "2"}});
    CHECK(lrange(c, "odd") == std::vector<std::string>{odd, "2"});
}

TEST_CASE("scripts: a failed job whose retry write Redis refuses is not acknowledged",
          "[hardening][scripts][multi]") {
    RedisServer redis;
    auto c = redis.connect();
    c.command({"SET", "retry", "a string"});
    c.command({"LPUSH", "queue:default",
               R"({"class":"Kiqd::Fail","args":[],"jid":"multi","queue":"default","retry":3})"});
    KiqdProcess kiqd(kiqd_binary(),
                     kiqd::test::default_queue_config(redis, "fetch: reliable\nconcurrency: 1\n"));
    REQUIRE(kiqd.wait_for_output("jid=multi queue=default fail"));
    CHECK(kiqd.stop() == 0);
    // Wherever it is, it must still be somewhere: its queue, a working list, or the dead set.
    long long held = llen(c, "queue:default") + zcard(c, "dead");
    auto lists = c.command({"KEYS", "queue:sq|*"});
    for (size_t i = 0; i < lists.size(); ++i) held += llen(c, std::string(lists[i].str()));
    CHECK(held == 1);
}

TEST_CASE(
    "script pipeline: calls Redis answers NOSCRIPT (a flushed cache) run once after one "
    "reload",
    "[scripts]") {
    RedisServer server;
    auto conn = server.connect();
    // KEYS[1] a counter; no ARGV. INCRs it; returns its new value.
    const kiqd::redis::Script incr("return redis.call('incr', KEYS[1])");
    // Not loaded yet in this process: the pipeline loads it first.
    auto first = incr.pipeline_unchecked(conn, {incr.evalsha_command({"c"}, {})});
    REQUIRE(first.size() == 1);
    CHECK(first[0].integer() == 1);
    // Redis forgets it (a restart, SCRIPT FLUSH): each call answers NOSCRIPT and is sent again,
    // so every call runs exactly once.
    conn.command({"SCRIPT", "FLUSH"});
    auto replies = incr.pipeline_unchecked(
        conn, {incr.evalsha_command({"c"}, {}), incr.evalsha_command({"c"}, {}),
               incr.evalsha_command({"c"}, {})});
    REQUIRE(replies.size() == 3);
    for (size_t i = 0; i < replies.size(); ++i) {
        REQUIRE_FALSE(replies[i].is_error());
        CHECK(replies[i].integer() == static_cast<long long>(i) + 2);
    }
    CHECK(conn.command({"GET", "c"}).str() == "4");
}

// Lock releases travel as EVALSHA in writes whose replies nobody reads (JobContext::after_job).
// When Redis has lost its script cache (a restart, SCRIPT FLUSH) they are answered NOSCRIPT and
// did not run: resend_noscript sends them again with their source, so the slot is freed anyway.
TEST_CASE("scripts: a deferred release answered NOSCRIPT is sent again with its source",
          "[hardening][scripts][concurrency]") {
    auto& redis = RedisServer::shared();
    redis.flushall();
    auto c = redis.connect();
    const std::string slots = "kiqd:concurrency:n:slots", waiting = "kiqd:concurrency:n:waiting";
    c.command({"ZADD", slots, "99999999999999", "me|x|1"});
    const kiqd::redis::Script release(kiqd::concurrency_release_script());
    const kiqd::redis::Command cmd =
        release.deferred_command(c, {slots, waiting}, {"me|x|1", "1", "60000", ""});
    REQUIRE(cmd[0] == "EVALSHA");
    c.command({"SCRIPT", "FLUSH"});
    const std::vector<kiqd::redis::Command> sent{{"PING"}, cmd};
    auto replies = c.pipeline_unchecked(sent);
    REQUIRE(replies[1].is_error());
    CHECK(zcard(c, slots) == 1);  // it did not run
    kiqd::redis::resend_noscript(c, sent, replies, 0, sent.size());
    CHECK(zcard(c, slots) == 0);
}

// Script::run_views hands hiredis views of its keys and arguments (a batched refill's hundreds
// of strings are not copied into a command first): what arrives must be byte for byte what was
// given (empty strings, embedded NULs), and a flushed script cache must be survived as run()
// survives it. The rvalue evalsha_command moves its strings into the same command the copying
// one builds.
TEST_CASE(
    "script: run_views sends its keys and arguments byte for byte and reloads after "
    "SCRIPT FLUSH",
    "[scripts]") {
    RedisServer server;
    auto conn = server.connect();
    // Returns KEYS then ARGV, as one flat array.
    const kiqd::redis::Script echo(
        "local out = {} for _, k in ipairs(KEYS) do out[#out + 1] = k end "
        "for _, a in ipairs(ARGV) do out[#out + 1] = a end return out");
    const std::string nul("a\0b", 3);
    const std::string long_arg(300, 'x');
    const std::vector<std::string_view> keys{"k1", nul};
    const std::vector<std::string_view> args{"", long_arg, "3"};
    const std::vector<std::string> expected{"k1", nul, "", long_arg, "3"};
    auto check = [&](const kiqd::redis::Reply& reply) {
        REQUIRE(reply.size() == expected.size());
        for (size_t i = 0; i < expected.size(); ++i) CHECK(reply[i].str() == expected[i]);
    };
    check(echo.run_views(conn, keys, args));  // loads it first
    conn.command({"SCRIPT", "FLUSH"});
    check(echo.run_views(conn, keys, args));  // NOSCRIPT: loaded again
    check(echo.run_views(conn, keys, args));

    const std::vector<std::string> ck{"k1", nul}, ca{"", long_arg};
    const kiqd::redis::Command copied = echo.evalsha_command(ck, ca);
    std::vector<std::string> k = ck, a = ca;
    const kiqd::redis::Command moved = echo.evalsha_command(std::move(k), std::move(a));
    CHECK(moved == copied);
    CHECK(moved == kiqd::redis::Command{"EVALSHA", echo.sha(), "2", "k1", nul, "", long_arg});
}
