#include "server/scheduler.hpp"

#include <catch2/catch.hpp>
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
