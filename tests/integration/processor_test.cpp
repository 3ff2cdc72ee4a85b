#include "server/processor.hpp"

#include <catch2/catch.hpp>

#include "kiqd/client.hpp"
#include "support/redis_reads.hpp"
#include "support/test_runtime.hpp"

using namespace kiqd;
using kiqd::test::llen;
using kiqd::test::RedisServer;
using kiqd::test::TestRuntime;
using kiqd::test::zcard;

namespace {

class Park final : public ServerMiddleware {
  public:
    std::string_view name() const override { return "park"; }
    void call(JobContext& ctx, const Next&) const override {
        ctx.redis.command({"RPUSH", "parked", ctx.job.raw});
    }
};

}  // namespace

TEST_CASE("processor: fetch → handler → counters; failures become Sidekiq retries", "[processor]") {
    auto& server = RedisServer::shared();
    server.flushall();
    TestRuntime t(server);
    auto conn = server.connect();
    Client client(t.keys, Compat::v6);
    client.push(conn, {{"class", "Kiqd::Noop"}});
    client.push(conn, {{"class", "Kiqd::Fail"}, {"args", {"kaboom"}}, {"retry", 5}});
    client.push(conn, {{"class", "Missing::Job"}});
    Processor p(t.rt, 0, {});
    std::mt19937_64 rng(1);
    for (int i = 0; i < 3; ++i) {
        auto unit = t.fetcher.retrieve_work(conn, rng, 0);
        REQUIRE(unit);
        p.process(conn, std::move(*unit));
    }
    CHECK(t.work.processed == 3);
    CHECK(t.work.failed == 2);
    CHECK(t.work.busy() == 0);
    auto retries = kiqd::test::parse_each(kiqd::test::zrange(conn, "retry"));
    REQUIRE(retries.size() == 2);
    std::set<std::string> classes;
    for (auto& j : retries) {
        classes.insert(j["error_class"].get<std::string>());
        CHECK(j["retry_count"] == 0);
        if (j["class"] == "Missing::Job")
            CHECK_THAT(j["error_message"].get<std::string>(),
                       Catch::StartsWith("uninitialized constant Missing::Job"));
    }
    CHECK(classes == std::set<std::string>{"RuntimeError", "NameError"});
    CHECK_THAT(t.logs(), Catch::Contains("class=Kiqd::Noop"));
}

TEST_CASE("processor: unrunnable payloads go to the dead set with a reason", "[processor]") {
    auto& server = RedisServer::shared();
    server.flushall();
    TestRuntime t(server);
    auto conn = server.connect();
    Processor p(t.rt, 0, {});
    p.process(conn, {"default", "{{{ not json"});
    p.process(conn, {"default", R"({"args":[1]})"});
    auto dead = kiqd::test::parse_each(kiqd::test::zrange(conn, "dead"));
    REQUIRE(dead.size() == 2);
    std::set<std::string> reasons;
    for (auto& entry : dead) reasons.insert(entry["error_class"].get<std::string>());
    CHECK(reasons == std::set<std::string>{"JSON::ParserError", "Kiqd::InvalidJob"});
    CHECK(t.work.processed == 0);
    CHECK_THAT(t.logs(), Catch::Contains("unrunnable payload sent to the dead set"));
}

TEST_CASE("processor: a middleware that parks a job counts it as neither processed nor failed",
          "[processor]") {
    auto& server = RedisServer::shared();
    server.flushall();
    TestRuntime t(server);
    t.chain.add(std::make_shared<Park>());
    auto conn = server.connect();
    Processor p(t.rt, 0, {});
    const std::string raw = R"({"class":"Kiqd::Fail","args":[],"jid":"j"})";
    p.process(conn, {"default", raw});
    CHECK(t.work.processed == 0);
    CHECK(t.work.failed == 0);
    CHECK(kiqd::test::lrange(conn, "parked").at(0) == raw);
    CHECK(zcard(conn, "retry") == 0);
}

TEST_CASE("fetch: weights decide the order, requeue goes to the front", "[fetch][reliable]") {
    auto& server = RedisServer::shared();
    server.flushall();
    const FetchMode mode = GENERATE(FetchMode::basic, FetchMode::reliable);
    TestRuntime t(server, {{"a", 0}, {"b", 0}}, 2, mode, 1);  // one job per fetch
    t.reliable();  // marks a reliable fetcher ready (none with basic fetch)
    auto conn = server.connect();
    conn.command({"LPUSH", "queue:b", "b1"});
    conn.command({"LPUSH", "queue:a", "a1", "a2"});
    std::mt19937_64 rng(1);
    auto u = t.fetcher.retrieve_work(conn, rng, 0);
    REQUIRE(u);
    CHECK(u->queue == "a");  // strict: a before b
    CHECK(u->payload == "a1");
    conn.pipeline(t.fetcher.requeue_commands({*u}));
    CHECK(conn.command({"LINDEX", "queue:a", "-1"}).str() == "a1");  // front of the line again
    // Reliable fetch: the requeue also took it out of the working list.
    CHECK(llen(conn, "queue:sq|testhost:1:abcdef012345|a") == 0);
}
