// Many queues against a real Redis (prefix_fetch.hpp): with 500 configured queues, basic fetch
// (one job or `prefetch`) and batched reliable fetch keep Sidekiq's weighted shares, with every
// queue non-empty and with most of them empty; a queue that fills after it was found empty is
// fetched from again, a fetch does not block while a queue has jobs, and paused queues are
// left alone. The shares are compared with Sidekiq's rule: the first non-empty queue of
// `shuffle.uniq` over the weight-expanded list is q with probability w(q)/Σw over the
// non-empty queues (prefix_fetch_draw_test.cpp checks the rule itself).
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>

#include "fetch/fair_fetch.hpp"
#include "fetch/fetcher.hpp"
#include "fetch/reliable_fetcher.hpp"
#include "support/job_pushes.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/test_runtime.hpp"

using namespace kiqd;
using kiqd::test::llen;
using kiqd::test::RedisServer;
using kiqd::test::TestRuntime;

namespace {

std::vector<QueueWeight> many_queues(int n) {
    std::vector<QueueWeight> queues;
    for (int i = 0; i < n; ++i) queues.push_back({"q" + std::to_string(i), i % 3 + 1});
    return queues;
}

int weight_of(const std::string& queue) {
    return std::stoi(queue.substr(1)) % 3 + 1;
}

void push_many(redis::Connection& conn, const std::string& queue, int jobs) {
    redis::Command cmd{"LPUSH", "queue:" + queue};
    for (int i = 0; i < jobs; ++i) cmd.push_back(queue + ":" + std::to_string(i));
    conn.command(cmd);
}

const char* mode_name(FetchMode mode, int batch) {
    if (mode == FetchMode::reliable) return batch > 1 ? "reliable batched" : "reliable";
    return batch > 1 ? "basic prefetch" : "basic";
}

// One of the fetches under test (0: basic, 1: basic with prefetch 50, 2: reliable batched 50)
// over 500 queues, on the shared Redis, flushed.
struct ManyQueues {
    explicit ManyQueues(int which)
        : mode(which == 2 ? FetchMode::reliable : FetchMode::basic),
          batch(which == 0 ? 1 : 50),
          t(flushed(), many_queues(500), 2, mode, batch),
          conn(RedisServer::shared().connect()) {
        t.reliable();
    }
    static RedisServer& flushed() {
        RedisServer::shared().flushall();
        return RedisServer::shared();
    }
    FetchMode mode;
    int batch;
    TestRuntime t;
    redis::Connection conn;
};

}  // namespace

TEST_CASE("500 queues, all non-empty: each weight class's share within 2 points of Sidekiq's",
          "[fetch][weights][many_queues]") {
    ManyQueues setup(GENERATE(0, 1, 2));
    auto& [mode, batch, t, conn] = setup;
    // 200 jobs each; a weight-3 queue is expected to give 30000 × 3/999 = 90 of them (±21: a
    // batch takes runs of 5 from one draw), so none runs dry during the test and every fetch
    // is a draw over all 500.
    for (int i = 0; i < 500; ++i) push_many(conn, "q" + std::to_string(i), 200);
    std::mt19937_64 rng(20261128);
    constexpr int kFetches = 30000;
    std::map<int, int> by_weight;
    for (int i = 0; i < kFetches; ++i) {
        auto u = t.fetcher.retrieve_work(conn, rng, 0);
        REQUIRE(u);
        CHECK(u->payload.rfind(u->queue + ":", 0) == 0);
        ++by_weight[weight_of(u->queue)];
    }
    // Sidekiq: class w gets (queues of weight w) × w / Σw = 167/334 × w / 1000 (weights 1, 2, 3
    // for 167, 167 and 166 queues: Σw = 167 + 334 + 498 = 999).
    const std::map<int, double> sidekiq{{1, 167.0 / 999}, {2, 334.0 / 999}, {3, 498.0 / 999}};
    for (const auto& [w, expected] : sidekiq) {
        const double share = static_cast<double>(by_weight[w]) / kFetches;
        INFO(mode_name(mode, batch)
             << ": weight " << w << " share " << share << ", Sidekiq " << expected);
        // A batched fetch draws once per run of 5 jobs (prefix_fetch.hpp), so 30,000 fetches
        // are 6,000 draws: the standard deviation of a share is at most 0.0065, and 2 points
        // are three of them. (The seeded draw does not fix the run: when the sweeps fall
        // depends on the clock.)
        CHECK(std::abs(share - expected) < 0.02);
    }
}

TEST_CASE("500 queues, 5 non-empty: they share by weight and the empty ones are not asked",
          "[fetch][weights][many_queues]") {
    ManyQueues setup(GENERATE(0, 1, 2));
    auto& [mode, batch, t, conn] = setup;
    // Weights 1, 2, 3, 1, 2 (q0, q1, q2, q3, q4 of the 500): Σ = 9.
    const std::vector<std::string> full{"q3", "q100", "q200", "q300", "q400"};
    std::map<std::string, double> sidekiq;
    // 12,000 jobs each: the weight-3 queue is expected to give 10,000 of the 30,000 fetches
    // (±190), and none runs dry.
    for (const auto& q : full) {
        push_many(conn, q, 12000);
        sidekiq[q] = weight_of(q) / 9.0;
    }
    REQUIRE(weight_of("q3") + weight_of("q100") + weight_of("q200") + weight_of("q300") +
                weight_of("q400") ==
            9);
    std::mt19937_64 rng(11);
    constexpr int kFetches = 30000;  // 6,000 draws of 5 when batched: σ of a share ≤ 0.0061
    std::map<std::string, int> taken;
    for (int i = 0; i < kFetches; ++i) {
        auto u = t.fetcher.retrieve_work(conn, rng, 0);
        REQUIRE(u);
        ++taken[u->queue];
    }
    for (const auto& [q, expected] : sidekiq) {
        const double share = static_cast<double>(taken[q]) / kFetches;
        INFO(mode_name(mode, batch) << ": " << q << " share " << share << ", Sidekiq " << expected);
        CHECK(std::abs(share - expected) < 0.02);
    }
}

TEST_CASE("500 queues: a queue that fills after it was found empty is fetched from",
          "[fetch][many_queues]") {
    ManyQueues setup(GENERATE(0, 1, 2));
    auto& [mode, batch, t, conn] = setup;
    std::mt19937_64 rng(3);
    push_many(conn, "q7", 1);
    auto first = t.fetcher.retrieve_work(conn, rng, 0);  // every other queue is found empty
    REQUIRE(first);
    CHECK(first->queue == "q7");
    // q7 is empty now too; a job in q499 (found empty a moment ago) is taken by the next fetch,
    // without waiting for the blocking wait: the fetch looks again before it blocks.
    push_many(conn, "q499", 1);
    auto second = t.fetcher.retrieve_work(conn, rng, 0);
    REQUIRE(second);
    CHECK(second->queue == "q499");
    CHECK(llen(conn, "queue:q499") == 0);
    // While q1 keeps the fetches busy (it never runs dry here), a job pushed to q2 is still
    // taken: the periodic sweep finds it (awaited, at most 20 s; it takes about a sweep period).
    push_many(conn, "q1", 1000);
    auto third = t.fetcher.retrieve_work(conn, rng, 0);
    REQUIRE(third);
    CHECK(third->queue == "q1");
    push_many(conn, "q2", 1);
    bool from_q2 = false;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!from_q2 && std::chrono::steady_clock::now() < give_up) {
        if (llen(conn, "queue:q1") < 200) push_many(conn, "q1", 1000);
        auto u = t.fetcher.retrieve_work(conn, rng, 0);
        REQUIRE(u);
        from_q2 = u->queue == "q2";
    }
    CHECK(from_q2);
}

TEST_CASE("500 queues: a paused queue is never fetched from, and is after its resume",
          "[fetch][pause][many_queues]") {
    ManyQueues setup(GENERATE(0, 1, 2));
    auto& [mode, batch, t, conn] = setup;
    push_many(conn, "q5", 100);
    push_many(conn, "q6", 100);
    t.order.set_paused({"q5"});
    std::mt19937_64 rng(5);
    for (int i = 0; i < 100; ++i) {
        auto u = t.fetcher.retrieve_work(conn, rng, 0);
        REQUIRE(u);
        CHECK(u->queue == "q6");
    }
    CHECK(llen(conn, "queue:q5") == 100);
    t.order.set_paused({});
    auto u = t.fetcher.retrieve_work(conn, rng, 0);
    REQUIRE(u);
    CHECK(u->queue == "q5");
}

TEST_CASE("500 queues, one of them fair: its tenants take turns, the plain queues are served",
          "[fetch][fair_fetch][many_queues]") {
    const int which = GENERATE(0, 1, 2);  // basic, basic with prefetch 50, reliable batched 50
    RedisServer::shared().flushall();
    auto conn = RedisServer::shared().connect();
    FairFetchConfig config;
    FairFetchQueue fair_queue;
    fair_queue.queue = "q7";
    fair_queue.arg = 0;
    config.queues.push_back(fair_queue);
    Keys keys;
    QueueOrder order(many_queues(500));
    auto fair = std::make_unique<FairFetch>(keys, order, config);
    std::unique_ptr<Fetcher> fetcher;
    if (which == 2) {
        auto reliable = std::make_unique<ReliableFetcher>(keys, order, "manyq:1:0123456789ab", 50,
                                                          1, std::move(fair), 1);
        reliable->set_ready();
        fetcher = std::move(reliable);
    } else {
        fetcher =
            std::make_unique<BasicFetcher>(keys, order, which == 1 ? 50 : 1, 1, std::move(fair), 1);
    }
    // Tenant a pushed 4 jobs before tenant b's 2; a plain queue has 10.
    std::vector<std::string> fair_jobs;
    for (const auto& [tenant, n] : std::vector<std::pair<std::string, int>>{
             {"a", 1}, {"a", 2}, {"a", 3}, {"a", 4}, {"b", 1}, {"b", 2}})
        fair_jobs.push_back(nlohmann::json{{"class", "Kiqd::Noop"},
                                           {"args", {tenant, n}},
                                           {"queue", "q7"},
                                           {"jid", tenant + std::to_string(n)}}
                                .dump());
    kiqd::test::push_raw(conn, "q7", fair_jobs);
    push_many(conn, "q300", 10);
    std::mt19937_64 rng(9);
    std::vector<std::string> from_fair;
    int from_plain = 0;
    for (int i = 0; i < 16; ++i) {
        auto u = fetcher->retrieve_work(conn, rng, 0);
        REQUIRE(u);
        if (u->queue == "q300") {
            ++from_plain;
            continue;
        }
        REQUIRE(u->queue == "q7");
        const auto j = nlohmann::json::parse(u->payload);
        from_fair.push_back(j["args"][0].get<std::string>() +
                            std::to_string(j["args"][1].get<int>()));
    }
    INFO(mode_name(which == 2 ? FetchMode::reliable : FetchMode::basic, which ? 50 : 1));
    CHECK(from_plain == 10);
    CHECK(from_fair == std::vector<std::string>{"a1", "b1", "a2", "b2", "a3", "a4"});
    CHECK(llen(conn, "queue:q300") == 0);
    CHECK(llen(conn, "queue:q7") == 0);
}
