#include "server/scheduler.hpp"

#include <catch2/catch.hpp>
#include <set>
#include <thread>

#include "kiqd/client.hpp"
#include "support/redis_reads.hpp"
#include "support/test_runtime.hpp"

using namespace kiqd;
using kiqd::test::llen;
using kiqd::test::RedisServer;
using kiqd::test::TestRuntime;
using kiqd::test::zcard;

TEST_CASE("scheduler: due jobs move to their queues with a fresh enqueued_at", "[scheduler]") {
    auto& server = RedisServer::shared();
    server.flushall();
    TestRuntime t(server);
    auto conn = server.connect();
    const double now = epoch_seconds();
    const std::string due = R"({"class":"W","args":[1],"queue":"mail","jid":"d1","x":[1.50]})";
    conn.command({"ZADD", "schedule", score_text(now - 5), due});
    conn.command({"ZADD", "schedule", score_text(now + 3600), R"({"class":"W","jid":"later"})"});
    conn.command({"ZADD", "retry", score_text(now - 1),
                  R"({"class":"W","queue":"default","jid":"r1","retry_count":0})"});
    conn.command({"ZADD", "retry", score_text(now - 1), "garbage"});
    Scheduler s(t.rt);
    CHECK(s.enqueue_due(conn, now) == 3);
    auto mail = kiqd::test::lrange(conn, "queue:mail");
    REQUIRE(mail.size() == 1);
    auto j = nlohmann::json::parse(mail[0]);
    CHECK(j["jid"] == "d1");
    CHECK(j["enqueued_at"].get<double>() == Approx(now));
    CHECK_THAT(mail[0], Catch::StartsWith(
                            R"({"class":"W","args":[1],"queue":"mail","jid":"d1","x":[1.50])"));
    CHECK(conn.command({"SISMEMBER", "queues", "mail"}).integer() == 1);
    CHECK(llen(conn, "queue:default") == 1);
    CHECK(zcard(conn, "schedule") == 1);  // the future one stays
    CHECK(zcard(conn, "retry") == 0);
    CHECK(zcard(conn, "dead") == 1);  // "garbage" is kept, with a reason
}

TEST_CASE("scheduler: two pollers racing move every job exactly once", "[scheduler]") {
    auto& server = RedisServer::shared();
    server.flushall();
    TestRuntime t(server);
    auto conn = server.connect();
    const double now = epoch_seconds();
    redis::Command zadd{"ZADD", "schedule"};
    for (int i = 0; i < 1000; ++i) {
        zadd.push_back(score_text(now - 1));
        zadd.push_back(R"({"class":"W","queue":"default","jid":")" + std::to_string(i) + "\"}");
    }
    conn.command(zadd);
    Scheduler s1(t.rt), s2(t.rt);
    size_t moved1 = 0, moved2 = 0;
    std::thread a([&] {
        auto c = server.connect();
        moved1 = s1.enqueue_due(c, now);
    });
    std::thread b([&] {
        auto c = server.connect();
        moved2 = s2.enqueue_due(c, now);
    });
    a.join();
    b.join();
    CHECK(moved1 + moved2 == 1000);
    CHECK(llen(conn, "queue:default") == 1000);
}

TEST_CASE("scheduler: poll interval follows Sidekiq's randomisation", "[scheduler]") {
    auto& server = RedisServer::shared();
    TestRuntime t(server);
    Scheduler s(t.rt);
    for (int i = 0; i < 200; ++i) {
        double one = s.random_poll_interval(1);  // 5 s average: uniform in [2.5, 7.5]
        CHECK(one >= 2.5);
        CHECK(one <= 7.5);
        double many = s.random_poll_interval(30);  // 150 s average: uniform in [0, 150]
        CHECK(many <= 150);
    }
}

namespace {

// A Sidekiq-shaped payload for queue `queue` (none when empty) with jid `jid`.
std::string scheduled_payload(const std::string& jid, const std::string& queue) {
    std::string p = R"({"class":"W","args":[],)";
    if (!queue.empty()) p += R"("queue":")" + queue + "\",";
    return p + R"("jid":")" + jid + "\"}";
}

// ZADDs `n` due members to `set`, jids "<prefix>0".."<prefix>n-1" in score order, queues taken
// in turn from `queues`; one ZADD.
void add_due(redis::Connection& conn, const std::string& set, const std::string& prefix, int n,
             const std::vector<std::string>& queues, double now) {
    redis::Command zadd{"ZADD", set};
    for (int i = 0; i < n; ++i) {
        zadd.push_back(score_text(now - 100 + i * 0.001));
        zadd.push_back(scheduled_payload(prefix + std::to_string(i), queues[i % queues.size()]));
    }
    conn.command(zadd);
}

// The jids of a queue in the order a fetch takes them (BRPOP: from the right).
std::vector<std::string> jids_in_fetch_order(redis::Connection& conn, const std::string& queue) {
    std::vector<std::string> out;
    auto items = kiqd::test::lrange(conn, "queue:" + queue);
    for (auto it = items.rbegin(); it != items.rend(); ++it)
        out.push_back(nlohmann::json::parse(*it)["jid"].get<std::string>());
    return out;
}

std::vector<std::string> expected_jids(const std::string& prefix, int n, int every, int first) {
    std::vector<std::string> out;
    for (int i = first; i < n; i += every) out.push_back(prefix + std::to_string(i));
    return out;
}

}  // namespace

TEST_CASE("scheduler: a backlog larger than a page moves in score order, each job to its queue",
          "[scheduler]") {
    auto& server = RedisServer::shared();
    server.flushall();
    TestRuntime t(server);
    auto conn = server.connect();
    const double now = epoch_seconds();
    const int n = 2500;  // several pages
    add_due(conn, "schedule", "s", n, {"a", "b", "c"}, now);
    add_due(conn, "retry", "r", 700, {"a", ""}, now);  // no queue: "default"
    conn.command({"ZADD", "schedule", score_text(now + 60), scheduled_payload("later", "a")});
    Scheduler s(t.rt);
    CHECK(s.enqueue_due(conn, now) == static_cast<size_t>(n + 700));
    // retry first, then schedule, as Sidekiq's poller: each queue's jobs in score order.
    auto a = expected_jids("r", 700, 2, 0);
    for (auto& jid : expected_jids("s", n, 3, 0)) a.push_back(jid);
    CHECK(jids_in_fetch_order(conn, "a") == a);
    CHECK(jids_in_fetch_order(conn, "b") == expected_jids("s", n, 3, 1));
    CHECK(jids_in_fetch_order(conn, "c") == expected_jids("s", n, 3, 2));
    CHECK(jids_in_fetch_order(conn, "default") == expected_jids("r", 700, 2, 1));
    auto queues = conn.command({"SMEMBERS", "queues"});
    std::set<std::string> names;
    for (size_t i = 0; i < queues.size(); ++i) names.emplace(queues[i].str());
    CHECK(names == std::set<std::string>{"a", "b", "c", "default"});
    CHECK(zcard(conn, "retry") == 0);
    CHECK(zcard(conn, "schedule") == 1);  // not due yet
    CHECK(zcard(conn, "dead") == 0);
}

TEST_CASE("scheduler: every moved job gets a fresh enqueued_at, every other byte kept",
          "[scheduler]") {
    auto& server = RedisServer::shared();
    server.flushall();
    TestRuntime t(server);
    auto conn = server.connect();
    const double now = epoch_seconds();
    // An old enqueued_at (a retry keeps the failed run's), float text Ruby writes, a nested
    // look-alike "queue" and unicode escapes: only enqueued_at may change.
    const std::string body =
        R"({"class":"W","args":[{"queue":"x","f":1.0e+20}],"queue":"q","s":"\u00e9\ud83d\ude00",)"
        R"("enqueued_at":1600000000.5,"retry_count":2,"z":[1.50,-0.0])";
    redis::Command zadd{"ZADD", "retry"};
    for (int i = 0; i < 1000; ++i) {
        zadd.push_back(score_text(now - 10));
        zadd.push_back(body + ",\"jid\":\"" + std::to_string(i) + "\"}");
    }
    conn.command(zadd);
    Scheduler s(t.rt);
    CHECK(s.enqueue_due(conn, now) == 1000);
    const double after = epoch_seconds();
    auto moved = kiqd::test::lrange(conn, "queue:q");
    REQUIRE(moved.size() == 1000);
    for (const auto& m : moved) {
        auto j = nlohmann::json::parse(m);
        CHECK(j["enqueued_at"].get<double>() >= Approx(now).margin(1e-6));
        CHECK(j["enqueued_at"].get<double>() <= after);
        // Removing enqueued_at's new value gives back the member without it.
        const std::string rest = m.substr(0, m.find("\"enqueued_at\":"));
        CHECK(rest == body.substr(0, body.find("\"enqueued_at\":")));
        CHECK(m.find(R"("retry_count":2,"z":[1.50,-0.0],"jid":")") != std::string::npos);
    }
}

TEST_CASE("scheduler: Sidekiq 8's enqueued_at is integer milliseconds", "[scheduler]") {
    auto& server = RedisServer::shared();
    server.flushall();
    TestRuntime t(server);
    t.config.compat = Compat::v8;
    auto conn = server.connect();
    const double now = epoch_seconds();
    add_due(conn, "schedule", "s", 3, {"default"}, now);
    Scheduler s(t.rt);
    CHECK(s.enqueue_due(conn, now) == 3);
    for (const auto& m : kiqd::test::lrange(conn, "queue:default")) {
        auto j = nlohmann::json::parse(m);
        REQUIRE(j["enqueued_at"].is_number_integer());
        CHECK(j["enqueued_at"].get<long long>() >= static_cast<long long>(now * 1000));
    }
}

TEST_CASE("scheduler: bad members in a page go to the dead set with their bytes; the rest move",
          "[scheduler]") {
    auto& server = RedisServer::shared();
    server.flushall();
    TestRuntime t(server);
    auto conn = server.connect();
    const double now = epoch_seconds();
    add_due(conn, "schedule", "s", 900, {"default"}, now);
    const std::vector<std::string> bad{"not json", R"(["an","array"])", R"({"class":"W",)"};
    for (const auto& b : bad) conn.command({"ZADD", "schedule", score_text(now - 50), b});
    // A queue that is not a string routes to "default", as a missing one does.
    conn.command(
        {"ZADD", "schedule", score_text(now - 50), R"({"class":"W","queue":7,"jid":"q7"})"});
    Scheduler s(t.rt);
    CHECK(s.enqueue_due(conn, now) == 901 + bad.size());
    CHECK(zcard(conn, "schedule") == 0);
    CHECK(llen(conn, "queue:default") == 901);
    auto dead = kiqd::test::zrange(conn, "dead");
    REQUIRE(dead.size() == bad.size());
    std::set<std::string> kept;
    for (const auto& d : dead) {
        auto j = nlohmann::json::parse(d);
        CHECK(j["class"] == "Kiqd::InvalidJob");
        kept.insert(j["args"][0].get<std::string>());
    }
    CHECK(kept == std::set<std::string>(bad.begin(), bad.end()));
    CHECK(t.logs().find("member is not a JSON object") != std::string::npos);
}

TEST_CASE("scheduler: a queue key of the wrong type holds its jobs only; the others move",
          "[scheduler]") {
    auto& server = RedisServer::shared();
    server.flushall();
    TestRuntime t(server);
    auto conn = server.connect();
    const double now = epoch_seconds();
    conn.command({"SET", "queue:stuck", "an application's string"});
    // Interleaved, more than a page of each: the pages after the first start after the members
    // left in place.
    add_due(conn, "schedule", "s", 1800, {"stuck", "ok"}, now);
    Scheduler s(t.rt);
    CHECK(s.enqueue_due(conn, now) == 900);
    CHECK(jids_in_fetch_order(conn, "ok") == expected_jids("s", 1800, 2, 1));
    CHECK(zcard(conn, "schedule") == 900);
    CHECK(conn.command({"SISMEMBER", "queues", "stuck"}).integer() == 0);
    CHECK(t.logs().find("WRONGTYPE queue:stuck holds a string, not a list") != std::string::npos);
    conn.command({"DEL", "queue:stuck"});
    CHECK(s.enqueue_due(conn, now) == 900);
    CHECK(jids_in_fetch_order(conn, "stuck") == expected_jids("s", 1800, 2, 0));
    CHECK(t.logs().find("no longer held up") != std::string::npos);
}

TEST_CASE("scheduler: large payloads are split over several calls, in order", "[scheduler]") {
    auto& server = RedisServer::shared();
    server.flushall();
    TestRuntime t(server);
    auto conn = server.connect();
    const double now = epoch_seconds();
    const std::string pad(200 * 1024, 'x');
    for (int i = 0; i < 12; ++i)
        conn.command({"ZADD", "schedule", score_text(now - 20 + i),
                      R"({"class":"W","queue":"big","jid":")" + std::to_string(i) + R"(","pad":")" +
                          pad + "\"}"});
    conn.command({"CONFIG", "RESETSTAT"});
    Scheduler s(t.rt);
    CHECK(s.enqueue_due(conn, now) == 12);
    CHECK(jids_in_fetch_order(conn, "big") == expected_jids("", 12, 1, 0));
    CHECK(kiqd::test::command_calls(conn, "evalsha") > 1);
}

TEST_CASE("scheduler: a flushed script cache mid-backlog loses and repeats nothing",
          "[scheduler]") {
    auto& server = RedisServer::shared();
    server.flushall();
    TestRuntime t(server);
    auto conn = server.connect();
    const double now = epoch_seconds();
    Scheduler s(t.rt);
    add_due(conn, "schedule", "a", 10, {"default"}, now);
    CHECK(s.enqueue_due(conn, now) == 10);
    conn.command({"SCRIPT", "FLUSH"});
    add_due(conn, "schedule", "b", 1000, {"default"}, now);
    CHECK(s.enqueue_due(conn, now) == 1000);
    CHECK(llen(conn, "queue:default") == 1010);
}

TEST_CASE("scheduler: two kiqd schedulers and a Sidekiq-style poller racing enqueue each job once",
          "[scheduler]") {
    auto& server = RedisServer::shared();
    server.flushall();
    TestRuntime t(server);
    auto conn = server.connect();
    const double now = epoch_seconds();
    const int n = 6000;
    add_due(conn, "schedule", "s", n, {"a", "b"}, now);
    add_due(conn, "retry", "r", n, {"a", "b"}, now);
    // Sidekiq 7.3's Scheduled::Enq: pop the lowest due member by script, then push it.
    const std::string zpop = R"lua(
local jobs = redis.call("zrange", KEYS[1], "-inf", ARGV[1], "byscore", "limit", 0, 1)
if jobs[1] then
  redis.call("zrem", KEYS[1], jobs[1])
  return jobs[1]
end
)lua";
    Scheduler s1(t.rt), s2(t.rt);
    size_t moved1 = 0, moved2 = 0, popped = 0;
    std::thread a([&] {
        auto c = server.connect();
        moved1 = s1.enqueue_due(c, now);
    });
    std::thread b([&] {
        auto c = server.connect();
        moved2 = s2.enqueue_due(c, now);
    });
    std::thread ruby([&] {
        auto c = server.connect();
        for (const std::string set : {"retry", "schedule"}) {
            for (;;) {
                auto job = c.command({"EVAL", zpop, "1", set, score_text(now)});
                if (job.is_nil()) break;
                const std::string queue = nlohmann::json::parse(job.str())["queue"];
                c.command({"LPUSH", "queue:" + queue, job.str()});
                ++popped;
            }
        }
    });
    a.join();
    b.join();
    ruby.join();
    const size_t all = 2 * static_cast<size_t>(n);
    CHECK(moved1 + moved2 + popped == all);
    std::multiset<std::string> jids;
    for (const std::string q : {"a", "b"})
        for (auto& jid : jids_in_fetch_order(conn, q)) jids.insert(jid);
    CHECK(jids.size() == all);
    CHECK(std::set<std::string>(jids.begin(), jids.end()).size() == all);
    CHECK(zcard(conn, "schedule") + zcard(conn, "retry") == 0);
}

TEST_CASE("scheduler: the batch script moves only what it removes when the page changed",
          "[scheduler]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    const redis::Script script(kMoveBatchToQueuesScript);
    // A page as read: m1, m2 for queue a, m3 for queue b (ranks 0..2).
    conn.command({"ZADD", "schedule", "1", "m1", "2", "m2", "3", "m3"});
    auto call = [&] {
        return script.run(conn, {"schedule", "queues", "queue:a", "queue:b"},
                          {"0", "2", "a", "2", "b", "1", "m1", "m2", "m3", "p1", "p2", "p3"});
    };
    SECTION("another process moved one: the rest move, it is not pushed again") {
        conn.command({"ZREM", "schedule", "m2"});
        auto reply = call();
        CHECK(reply[0].integer() == 2);
        CHECK(kiqd::test::lrange(conn, "queue:a") == std::vector<std::string>{"p1"});
        CHECK(kiqd::test::lrange(conn, "queue:b") == std::vector<std::string>{"p3"});
        CHECK(zcard(conn, "schedule") == 0);
    }
    SECTION("a member added before the page since: it stays, the page moves") {
        conn.command({"ZADD", "schedule", "0", "new"});
        auto reply = call();
        CHECK(reply[0].integer() == 3);
        CHECK(kiqd::test::lrange(conn, "queue:a") == std::vector<std::string>{"p2", "p1"});
        CHECK(kiqd::test::zrange(conn, "schedule") == std::vector<std::string>{"new"});
    }
    SECTION("the page is still there: all move, each queue in order, queues added") {
        auto reply = call();
        CHECK(reply[0].integer() == 3);
        CHECK(kiqd::test::lrange(conn, "queue:a") == std::vector<std::string>{"p2", "p1"});
        CHECK(kiqd::test::lrange(conn, "queue:b") == std::vector<std::string>{"p3"});
        CHECK(conn.command({"SCARD", "queues"}).integer() == 2);
        CHECK(zcard(conn, "schedule") == 0);
        // Run again (a retry after a lost reply): nothing is pushed twice.
        CHECK(call()[0].integer() == 0);
        CHECK(llen(conn, "queue:a") == 2);
    }
    SECTION("a queue of the wrong type holds its members; the other queue's move") {
        conn.command({"SET", "queue:a", "x"});
        auto reply = call();
        REQUIRE(reply.size() == 3);
        CHECK(reply[0].integer() == 1);
        CHECK(std::string(reply[1].str()) ==
              "WRONGTYPE queue:a holds a string, not a list; nothing was written");
        CHECK(reply[2].integer() == 2);
        CHECK(kiqd::test::zrange(conn, "schedule") == std::vector<std::string>{"m1", "m2"});
        CHECK(kiqd::test::lrange(conn, "queue:b") == std::vector<std::string>{"p3"});
    }
}
