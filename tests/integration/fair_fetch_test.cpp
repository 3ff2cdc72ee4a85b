// Fair fetch (fair_fetch.hpp, fair_drain.hpp) against a real Redis: tenants are served
// round-robin (weighted) whoever pushed the jobs, every job stays visible to Sidekiq's API,
// hostile payloads go through, pause and reliable fetch keep their guarantees, turning the mode
// off puts every job back in order; with real daemons, kill -9 loses nothing and two processes
// share one rotation.
#include "fetch/fair_fetch.hpp"

#include <signal.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "fetch/fair_drain.hpp"
#include "fetch/reliable_fetcher.hpp"
#include "integration/fair_fetch_fixture.hpp"
#include "server/fair_metrics.hpp"
#include "support/job_pushes.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/test_daemon_records.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using kiqd::test::KiqdProcess;
using kiqd::test::llen;
using kiqd::test::lrange;
using kiqd::test::ran_count;
using kiqd::test::RedisServer;
using kiqd::test::wait_until;
using kiqd::test::zcard;
using list_of = std::vector<std::string>;

using namespace kiqd::test::fair_fixture;

TEST_CASE("fair fetch: tenants are served round-robin, whatever order they were pushed in",
          "[fair_fetch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    std::vector<std::string> raws;
    for (int i = 1; i <= 5; ++i) raws.push_back(job("a", i));
    for (int i = 1; i <= 3; ++i) raws.push_back(job("b", i));
    for (int i = 1; i <= 2; ++i) raws.push_back(job("c", i));
    kiqd::test::push_raw(conn, "default", raws);
    CHECK(sidekiq_total(conn) == 10);

    FairSetup s({{"default", 0}}, fair_default());
    BasicFetcher fetcher(s.keys, s.order, 1, 1, s.fair());
    std::mt19937_64 rng(1);
    auto first = fetcher.retrieve_work(conn, rng, 0);
    REQUIRE(first);
    CHECK(first->queue == "default");
    CHECK(label(first->payload) == "a/1");
    // Split into one Sidekiq queue per tenant, each listed in `queues`: the API counts them all.
    CHECK(llen(conn, "queue:default") == 0);
    CHECK(llen(conn, "queue:default@t:a") == 4);
    CHECK(llen(conn, "queue:default@t:b") == 3);
    CHECK(conn.command({"SISMEMBER", "queues", "default@t:c"}).integer() == 1);
    CHECK(sidekiq_total(conn) == 9);
    CHECK(fetch_labels(fetcher, conn, 20) ==
          list_of{"b/1", "c/1", "a/2", "b/2", "c/2", "a/3", "b/3", "a/4", "a/5"});
    // Empty tenants leave the ring and the queues set.
    CHECK(llen(conn, "kiqd:fair:default:ring") == 0);
    CHECK(conn.command({"SMEMBERS", "queues"}).size() == 1);
    CHECK(sidekiq_total(conn) == 0);
}

TEST_CASE("fair fetch: a tenant's weight is how many jobs it gets per turn", "[fair_fetch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    std::vector<std::string> raws;
    for (int i = 1; i <= 8; ++i) raws.push_back(job("paying", i));
    for (int i = 1; i <= 4; ++i) raws.push_back(job("free", i));
    kiqd::test::push_raw(conn, "default", raws);
    FairSetup s({{"default", 0}}, fair_default({{"paying", 3}}));
    BasicFetcher fetcher(s.keys, s.order, 1, 1, s.fair());
    CHECK(fetch_labels(fetcher, conn, 20) == list_of{"paying/1", "paying/2", "paying/3", "free/1",
                                                     "paying/4", "paying/5", "paying/6", "free/2",
                                                     "paying/7", "paying/8", "free/3", "free/4"});
    CHECK(conn.command({"EXISTS", "kiqd:fair:default:served"}).integer() == 0);
}

TEST_CASE("fair fetch: batched reliable fetch moves jobs round-robin into the working list",
          "[fair_fetch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    std::vector<std::string> raws;
    for (int i = 1; i <= 6; ++i) raws.push_back(job("big", i));
    raws.push_back(job("small", 1));
    kiqd::test::push_raw(conn, "default", raws);
    FairSetup s({{"default", 0}}, fair_default());
    ReliableFetcher fetcher(s.keys, s.order, kIdentity, 4, 1, s.fair());
    fetcher.set_ready();
    const std::string working = "queue:sq|" + kIdentity + "|default";
    std::mt19937_64 rng(3);
    auto unit = fetcher.retrieve_work(conn, rng, 0);
    REQUIRE(unit);
    CHECK(label(unit->payload) == "big/1");
    // One batch of 4 went into the working list, round robin: big/1, small/1, big/2, big/3.
    CHECK(working_labels(conn, working) == list_of{"big/1", "small/1", "big/2", "big/3"});
    // Queued plus in the working list: nothing is anywhere else.
    CHECK(sidekiq_total(conn) + llen(conn, working) == 7);
    // A clean stop puts the buffered jobs back (into the plain queue, split again later).
    conn.pipeline_unchecked(fetcher.release_commands());
    CHECK(llen(conn, working) == 1);  // the one handed out, not acknowledged
    CHECK(sidekiq_total(conn) == 6);
}

// One call serves several tenants from one read of the ring, and wraps round it when the ring is
// shorter than the batch: the turn order must be exactly one LMOVE per job's, each tenant's jobs
// in enqueue order, and a weighted tenant's turn (W jobs in a row) must go on across calls.
TEST_CASE("fair fetch: one call serves many tenants in ring order, weights included",
          "[fair_fetch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    std::vector<std::string> raws;
    for (int i = 1; i <= 7; ++i) raws.push_back(job("p", i));
    for (int i = 1; i <= 3; ++i) raws.push_back(job("a", i));
    for (int i = 1; i <= 2; ++i) raws.push_back(job("b", i));
    kiqd::test::push_raw(conn, "default", raws);
    const std::string working = "queue:sq|" + kIdentity + "|default";
    // batch_size 2: p's turn of 3 spans calls (its count is kept between them); batch_size 20:
    // one call wraps round the ring three times.
    const size_t batch = GENERATE(size_t{2}, size_t{20});
    CAPTURE(batch);
    FairSetup s({{"default", 0}}, fair_default({{"p", 3}}));
    ReliableFetcher fetcher(s.keys, s.order, kIdentity, batch, 1, s.fair());
    fetcher.set_ready();
    std::mt19937_64 rng(5);
    for (int i = 0; i < 12; ++i) REQUIRE(fetcher.retrieve_work(conn, rng, 0));
    CHECK_FALSE(fetcher.retrieve_work(conn, rng, 0));
    CHECK(working_labels(conn, working) == list_of{"p/1", "p/2", "p/3", "a/1", "b/1", "p/4", "p/5",
                                                   "p/6", "a/2", "b/2", "p/7", "a/3"});
    CHECK(llen(conn, "kiqd:fair:default:ring") == 0);
    CHECK(conn.command({"EXISTS", "kiqd:fair:default:served"}).integer() == 0);
    CHECK(conn.command({"SMEMBERS", "queues"}).size() == 1);
}

// Tenants that empty within a call leave the ring at once, and one that stays goes to the back
// of the turn: a tenant pushed later joins behind them.
TEST_CASE("fair fetch: a call's leavers and stayers leave the ring as one LMOVE per job would",
          "[fair_fetch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    std::vector<std::string> raws;
    for (int i = 1; i <= 3; ++i) raws.push_back(job("a", i));
    for (const char* t : {"b", "c", "d"}) raws.push_back(job(t, 1));
    kiqd::test::push_raw(conn, "default", raws);
    FairSetup s({{"default", 0}}, fair_default());
    BasicFetcher fetcher(s.keys, s.order, 3, 1, s.fair());  // prefetch 3: calls of 3 jobs
    std::mt19937_64 rng(9);
    auto first = fetcher.retrieve_work(conn, rng, 0);
    REQUIRE(first);
    CHECK(label(first->payload) == "a/1");
    // The call took a/1, b/1, c/1: b and c left; a went to the head, d is next.
    CHECK(lrange(conn, "kiqd:fair:default:ring") == list_of{"a", "d"});
    CHECK(conn.command({"SISMEMBER", "queues", "default@t:b"}).integer() == 0);
    CHECK(conn.command({"SISMEMBER", "queues", "default@t:a"}).integer() == 1);
    kiqd::test::push_raw(conn, "default", {job("e", 1)});
    CHECK(fetch_labels(fetcher, conn, 10) == list_of{"b/1", "c/1", "d/1", "a/2", "e/1", "a/3"});
    CHECK(llen(conn, "kiqd:fair:default:ring") == 0);
}

// Threads fetching at once share script calls (fetch_combiner.hpp): each job still reaches
// exactly one thread, and with reliable fetch each is in the working list until acknowledged.
TEST_CASE("fair fetch: threads fetching at once get every job exactly once", "[fair_fetch]") {
    const bool reliable = GENERATE(false, true);
    CAPTURE(reliable);
    auto& server = RedisServer::shared();
    server.flushall();
    auto setup = server.connect();
    std::vector<std::string> raws;
    for (int i = 1; i <= 200; ++i) raws.push_back(job("big", i));
    for (const char* t : {"s1", "s2", "s3"})
        for (int i = 1; i <= 20; ++i) raws.push_back(job(t, i));
    kiqd::test::push_raw(setup, "default", raws);
    FairSetup s({{"default", 0}}, fair_default());
    constexpr int kThreads = 6;
    std::unique_ptr<Fetcher> fetcher;
    if (reliable) {
        auto r =
            std::make_unique<ReliableFetcher>(s.keys, s.order, kIdentity, 1, 1, s.fair(), kThreads);
        r->set_ready();
        fetcher = std::move(r);
    } else {
        fetcher = std::make_unique<BasicFetcher>(s.keys, s.order, 1, 1, s.fair(), kThreads);
    }
    std::mutex mutex;
    std::multiset<std::string> got;
    std::vector<std::thread> threads;
    // A lost job would leave the threads polling empty queues: bounded, then the CHECK fails.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            auto conn = server.connect();
            std::mt19937_64 rng(t);
            std::vector<redis::Command> pending;
            for (;;) {
                {
                    std::lock_guard lock(mutex);
                    if (got.size() >= raws.size()) return;
                }
                if (std::chrono::steady_clock::now() > deadline) return;
                auto unit = fetcher->retrieve_work(conn, rng, static_cast<size_t>(t), pending);
                if (!unit) continue;
                std::lock_guard lock(mutex);
                got.insert(unit->payload);
            }
        });
    for (auto& t : threads) t.join();
    CHECK(got == std::multiset<std::string>(raws.begin(), raws.end()));
    CHECK(sidekiq_total(setup) == 0);
    CHECK(llen(setup, "kiqd:fair:default:ring") == 0);
    if (reliable) CHECK(llen(setup, "queue:sq|" + kIdentity + "|default") == 260);
}

TEST_CASE("fair fetch: a paused fair queue is not fetched, and its tenant lists stay",
          "[fair_fetch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    kiqd::test::push_raw(conn, "default", {job("a", 1), job("b", 1), job("a", 2)});
    kiqd::test::push_raw(conn, "other", {job("x", 1)});
    FairSetup s({{"default", 0}, {"other", 0}}, fair_default());
    BasicFetcher fetcher(s.keys, s.order, 1, 1, s.fair());
    CHECK(fetch_labels(fetcher, conn, 1) == list_of{"a/1"});
    s.order.set_paused({"default"});
    // Only the other queue's job; then nothing (the paused queue is skipped, not emptied).
    CHECK(fetch_labels(fetcher, conn, 3) == list_of{"x/1"});
    CHECK(llen(conn, "queue:default@t:a") == 1);
    CHECK(llen(conn, "queue:default@t:b") == 1);
    s.order.set_paused({});
    CHECK(fetch_labels(fetcher, conn, 3) == list_of{"b/1", "a/2"});
}

TEST_CASE("fair fetch: payloads without a usable tenant go through, none is lost", "[fair_fetch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    const list_of hostile{"{oops",
                          R"({"class":"X","queue":"default"})",
                          R"({"class":"X","args":"notalist"})",
                          R"({"class":"X","args":[{"tenant":"obj"}]})",
                          R"({"class":"X","args":[]})",
                          R"([1,2,3])",
                          R"({"class":"X","args":[42]})",
                          R"("just a string")",
                          std::string("\xff\xfe binary", 9)};
    kiqd::test::push_raw(conn, "default", hostile);
    FairSetup s({{"default", 0}}, fair_default());
    BasicFetcher fetcher(s.keys, s.order, 1, 1, s.fair());
    std::mt19937_64 rng(5);
    std::vector<std::string> got;
    for (int i = 0; i < 20; ++i) {
        auto unit = fetcher.retrieve_work(conn, rng, 0);
        if (!unit) break;
        got.push_back(unit->payload);
        if (got.size() == 1) {
            // A number is a tenant ("42"); everything else shares the tenantless bucket.
            CHECK(llen(conn, "queue:default@t:42") == 1);
            CHECK(llen(conn, "queue:default@t:") + 1 + 1 == static_cast<long long>(hostile.size()));
        }
    }
    std::sort(got.begin(), got.end());
    auto want = hostile;
    std::sort(want.begin(), want.end());
    CHECK(got == want);  // byte for byte, each exactly once
}

namespace {

// The split reads each job's tenant with a cheap string scan and falls back to cjson.decode
// when the scan is not sure; either way the tenant must be the decoder's. `cases` are pushed
// after a sentinel job (tenant "first", served first); the one fetch splits them all.
void check_tenants(const FairFetchConfig& config,
                   const std::vector<std::pair<std::string, std::string>>& cases) {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    std::vector<std::string> raws{R"({"class":"X","args":["first"],"tenant_id":"first"})"};
    std::map<std::string, long long> want;
    for (const auto& [payload, tenant] : cases) {
        raws.push_back(payload);
        ++want[tenant];
    }
    kiqd::test::push_raw(conn, "default", raws);
    FairSetup s({{"default", 0}}, config);
    BasicFetcher fetcher(s.keys, s.order, 1, 1, s.fair());
    std::mt19937_64 rng(9);
    auto unit = fetcher.retrieve_work(conn, rng, 0);
    REQUIRE(unit);
    CHECK(unit->payload == raws.front());
    long long total = 0;
    for (const auto& [tenant, n] : want) {
        INFO("tenant '" << tenant << "'");
        CHECK(llen(conn, "queue:default@t:" + tenant) == n);
        total += n;
    }
    CHECK(total == static_cast<long long>(cases.size()));
    CHECK(sidekiq_total(conn) == total);  // nothing anywhere else
    // Every job comes out byte for byte.
    std::vector<std::string> got;
    for (size_t i = 0; i < cases.size() + 2; ++i) {
        auto u = fetcher.retrieve_work(conn, rng, 0);
        if (!u) break;
        got.push_back(u->payload);
    }
    std::vector<std::string> expected(raws.begin() + 1, raws.end());
    std::sort(got.begin(), got.end());
    std::sort(expected.begin(), expected.end());
    CHECK(got == expected);
}

}  // namespace

TEST_CASE("fair fetch: a tenant list that is someone else's key loses no job", "[fair_fetch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    conn.command({"SET", "queue:default@t:b", "not a list"});
    kiqd::test::push_raw(conn, "default", {job("a", 1), job("b", 1), job("b", 2)});
    FairSetup s({{"default", 0}}, fair_default());
    BasicFetcher fetcher(s.keys, s.order, 1, 1, s.fair());
    // b's jobs go to the tenantless bucket instead; the string is left alone.
    CHECK(fetch_labels(fetcher, conn, 10) == list_of{"a/1", "b/1", "b/2"});
    CHECK(conn.command({"GET", "queue:default@t:b"}).str() == "not a list");
    // With the tenantless bucket taken too, the split leaves b's jobs in the plain queue, in
    // order; once the ring is empty, basic fetch's BRPOP takes them from there.
    conn.command({"SET", "queue:default@t:", "taken"});
    kiqd::test::push_raw(conn, "default", {job("a", 2), job("b", 3), job("b", 4)});
    std::mt19937_64 rng(4);
    auto first = fetcher.retrieve_work(conn, rng, 0);
    REQUIRE(first);
    CHECK(label(first->payload) == "a/2");
    CHECK(lrange(conn, "queue:default") == list_of{job("b", 4), job("b", 3)});
    CHECK(fetch_labels(fetcher, conn, 10) == list_of{"b/3", "b/4"});
    CHECK(conn.command({"GET", "queue:default@t:"}).str() == "taken");
}

TEST_CASE("fair fetch: args[N] is read exactly on tricky payloads", "[fair_fetch]") {
    check_tenants(fair_default(),
                  {
                      {R"({"class":"X","args":["plain",1],"jid":"j1"})", "plain"},
                      {R"({"class":"X","args": ["spaced", 1]})", "spaced"},
                      {R"({"class":"X","args":["a\"b",1]})", "a\"b"},
                      {R"({"class":"X","args":["back\\slash"]})", "back\\slash"},
                      {"{\"class\":\"X\",\"args\":[\"caf\xc3\xa9\",1]}", "caf\xc3\xa9"},
                      {R"({"class":"X","args":["caf\u00e9",2]})", "caf\xc3\xa9"},
                      {R"({"class":"X","args":[42,1]})", "42"},
                      {R"({"class":"X","args":[1.5e3]})", "1500"},
                      {R"({"class":"X","args":[-7,"x"]})", "-7"},
                      {R"({"class":"X","args":[]})", ""},
                      {R"({"class":"X"})", ""},
                      {R"({"class":"X","args":[true]})", ""},
                      {R"({"class":"X","args":[{"args":["nested"]}]})", ""},
                      {R"({"meta":{"args":["nested"]},"args":["top"]})", "top"},
                      {R"({"note":"\"args\":[\"fake\"]","args":["real"]})", "real"},
                      {R"({"x":"[{","args":["bracket"]})", "bracket"},
                      {R"({"args":["first-dup"],"args":["last-dup"]})", "last-dup"},
                      // Not JSON (cjson says so), but the scan is not a validator: it is
                      // served as its apparent tenant's, and dies when run, as in a plain queue.
                      {R"({"class":"X","args":["trailing",1],})", "trailing"},
                      {R"({"class":"X","args":["open",1])", ""},
                      {R"({"class":"X","args":["ws"] } )", "ws"},
                  });
}

TEST_CASE("fair fetch: the args element N>0 and a top-level key are read exactly", "[fair_fetch]") {
    auto second = fair_default();
    second.queues[0].arg = 1;
    check_tenants(second, {
                              {R"({"args":[1,"two"]})", "two"},
                              {R"({"args":["one",22]})", "22"},
                              {R"({"args":[{"a":1},"obj-before"]})", "obj-before"},
                              {R"({"args":["only"]})", ""},
                          });
    FairFetchConfig by_key;
    FairFetchQueue q;
    q.queue = "default";
    q.key = "tenant_id";
    by_key.queues.push_back(q);
    check_tenants(by_key, {
                              {R"({"class":"X","args":[],"tenant_id":"acme"})", "acme"},
                              {R"({"meta":{"tenant_id":"wrong"},"tenant_id":"right"})", "right"},
                              {R"({"args":[{"tenant_id":"in-arg"}],"tenant_id":"top"})", "top"},
                              {R"({"tenant_id":"early","meta":{"tenant_id":"late"}})", "early"},
                              {R"({"tenant_id":7,"args":[]})", "7"},
                              {R"({"tenant_id":"t\u00e9"})", "t\xc3\xa9"},
                              {R"({"tenant_id" : "sp"})", "sp"},
                              {R"({"meta":{"tenant_id":"only-nested"}})", ""},
                              {R"({"tenant_id":null})", ""},
                              {R"({"x":"\"tenant_id\":\"fake\"","tenant_id":"real"})", "real"},
                          });
}

TEST_CASE("fair fetch: beyond max_tenants new tenants share the tenantless bucket",
          "[fair_fetch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    kiqd::test::push_raw(conn, "default", {job("a", 1), job("b", 1), job("c", 1), job("c", 2)});
    FairSetup s({{"default", 0}}, fair_default({}, 2));
    BasicFetcher fetcher(s.keys, s.order, 1, 1, s.fair());
    CHECK(fetch_labels(fetcher, conn, 1) == list_of{"a/1"});
    CHECK(llen(conn, "queue:default@t:c") == 0);
    CHECK(llen(conn, "queue:default@t:") == 2);  // c's jobs, in order
    CHECK(fetch_labels(fetcher, conn, 5) == list_of{"b/1", "c/1", "c/2"});
}

TEST_CASE("fair fetch: drain puts every job back into the plain queue in enqueue order",
          "[fair_fetch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    // Interleaved tenants, increasing enqueued_at; one job without enqueued_at keeps its place
    // after its tenant's previous job.
    std::vector<std::string> raws;
    const char* tenants[] = {"a", "b", "a", "c", "a", "b", "c", "c"};
    for (int i = 0; i < 8; ++i) raws.push_back(job(tenants[i], i, 1700000000.0 + i));
    raws.push_back(R"({"class":"X","args":["b",99]})");  // no enqueued_at: after b's last (5)
    raws.push_back(job("d", 9, 1700000009.0));
    kiqd::test::push_raw(conn, "default", raws);
    FairSetup s({{"default", 0}}, fair_default());
    BasicFetcher fetcher(s.keys, s.order, 1, 1, s.fair());
    CHECK(fetch_labels(fetcher, conn, 1) == list_of{"a/0"});
    CHECK(llen(conn, "queue:default") == 0);
    // A job pushed after the split stays behind the drained ones.
    conn.command({"LPUSH", "queue:default", job("z", 10, 1700000010.0)});

    CHECK(drain_fair_queue(conn, s.keys, "default") == 9);
    auto back = lrange(conn, "queue:default");  // newest first
    std::vector<std::string> order;
    for (auto it = back.rbegin(); it != back.rend(); ++it) {
        auto j = nlohmann::json::parse(*it);
        order.push_back(j["args"][0].get<std::string>() + "/" +
                        std::to_string(j["args"][1].get<int>()));
    }
    CHECK(order == list_of{"b/1", "a/2", "c/3", "a/4", "b/5", "b/99", "c/6", "c/7", "d/9", "z/10"});
    CHECK(llen(conn, "kiqd:fair:default:ring") == 0);
    CHECK(conn.command({"SMEMBERS", "queues"}).size() == 1);
    CHECK(!has_fair_state(conn, s.keys, "default"));
    CHECK(drain_fair_queue(conn, s.keys, "default") == 0);
}

TEST_CASE("fair fetch: backlog per tenant, top N plus the rest", "[fair_fetch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    std::vector<std::string> raws;
    for (int i = 0; i < 5; ++i) raws.push_back(job("big", i, 1700000000.0 + i));
    for (int i = 0; i < 3; ++i) raws.push_back(job("mid", i, 1700000100.0 + i));
    raws.push_back(job("s1", 0));
    raws.push_back(job("s2", 0));
    kiqd::test::push_raw(conn, "default", raws);
    FairSetup s({{"default", 0}}, fair_default());
    BasicFetcher fetcher(s.keys, s.order, 1, 1, s.fair());
    CHECK(fetch_labels(fetcher, conn, 1) == list_of{"big/0"});
    auto b = fair_backlog(conn, s.keys, "default", 2);
    CHECK(b.unsplit == 0);
    REQUIRE(b.top.size() == 2);
    CHECK(b.top[0].tenant == "big");
    CHECK(b.top[0].jobs == 4);
    CHECK(b.top[0].oldest_enqueued_at == Approx(1700000001.0));
    CHECK(b.top[1].tenant == "mid");
    CHECK(b.top[1].jobs == 3);
    CHECK(b.other_tenants == 2);
    CHECK(b.other_jobs == 2);
    // /metrics: the top 10 tenants (here all 4) and the gauges, ages from enqueued_at.
    const std::string text = render_fair_metrics(conn, s.keys, {"default"}, 1700000011.0);
    CHECK_THAT(text,
               Catch::Contains("kiqd_fair_tenant_jobs{queue=\"default\",tenant=\"big\"} 4\n"));
    CHECK_THAT(text, Catch::Contains(
                         "kiqd_fair_tenant_wait_seconds{queue=\"default\",tenant=\"big\"} 10\n"));
    CHECK_THAT(text, Catch::Contains("kiqd_fair_tenants{queue=\"default\"} 4\n"));
    CHECK_THAT(text, Catch::Contains("kiqd_fair_unsplit_jobs{queue=\"default\"} 0\n"));
    CHECK(text.find("tenant=\"other\"") == std::string::npos);

    // The operator's view and drain (kiqd fair-fetch status|drain QUEUE).
    const std::string kiqd = kiqd::test::binary_under_test(KIQD_BINARY);
    auto [st, status] = kiqd::test::run_command(
        {kiqd, "fair-fetch", "status", "default", "--redis-url", server.url(), "--json"});
    CHECK(st == 0);
    auto j = nlohmann::json::parse(status);
    CHECK(j["tenants"].size() == 4);
    CHECK(j["tenants"][0]["tenant"] == "big");
    auto [dst, drained] = kiqd::test::run_command(
        {kiqd, "fair-fetch", "drain", "default", "--redis-url", server.url()});
    CHECK(dst == 0);
    CHECK_THAT(drained, Catch::Contains("9 jobs moved back into queue:default"));
    CHECK(llen(conn, "queue:default") == 9);
}

TEST_CASE("fair fetch daemon: kill -9 loses nothing; two processes share one rotation",
          "[fair_fetch][daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    constexpr int kGreedy = 3000;
    constexpr int kSmall = 20;
    std::mt19937_64 rng(11);
    kiqd::test::push_jobs(conn, kGreedy, [&](int) {
        const double seconds = static_cast<double>(1 + rng() % 5) / 1000.0;  // 1–5 ms
        return nlohmann::ordered_json{{"class", "Test::Record"}, {"args", {seconds, "greedy"}}};
    });
    kiqd::test::push_jobs(conn, kSmall, [&](int i) {
        return nlohmann::ordered_json{{"class", "Test::Record"},
                                      {"args", {0, "small" + std::to_string(i % 4)}}};
    });
    const std::string yaml = kiqd::test::kiqd_config(
        server,
        "concurrency: 2\nlogging: {level: warn}\nqueues: [default]\nfetch: reliable\n"
        "reliable_fetch: {liveness_ttl: 3, orphan_check_interval: 1, batch_size: 1}\n"
        "fair_fetch: {default: {arg: 1}}\n");
    {
        KiqdProcess a(KIQD_TEST_DAEMON, yaml);
        KiqdProcess b(KIQD_TEST_DAEMON, yaml);
        REQUIRE(wait_until([&] { return ran_count(conn) >= 500; }, std::chrono::seconds(60)));
        a.signal(SIGKILL);
        CHECK(a.wait_exit() == 128 + SIGKILL);
        // b goes on; a's working list comes back through orphan recovery.
        auto all_done = [&] {
            if (sidekiq_total(conn) > 0) return false;
            auto members = conn.command({"SMEMBERS", "kiqd:reliable:working"});
            for (size_t i = 0; i < members.size(); ++i)
                if (llen(conn, std::string(members[i].str())) > 0) return false;
            return ran_count(conn) >= kGreedy + kSmall;
        };
        REQUIRE(wait_until(all_done, std::chrono::seconds(120)));
        CHECK(b.stop() == 0);
    }
    const auto ran = kiqd::test::ran_records(conn);
    const auto jids = kiqd::test::jids_of(ran);
    std::printf("fair fetch kill -9 test: %d jobs, %zu runs, %zu distinct\n", kGreedy + kSmall,
                ran.size(), jids.size());
    CHECK(jids.size() == static_cast<size_t>(kGreedy + kSmall));  // none lost
    CHECK(ran.size() - jids.size() <= 4);                         // at most the running ones
    // The small tenants' jobs, pushed after 3,000 greedy ones, were fetched in the first
    // rounds of the shared rotation: each round serves every tenant once, and runs start in
    // fetch order up to the 4 threads of the two processes.
    size_t last_small = 0;
    std::set<int> pids_small, pids_greedy;
    for (size_t i = 0; i < ran.size(); ++i) {
        const bool small = ran[i]["args"][1].get<std::string>() != "greedy";
        if (small) last_small = std::max(last_small, i);
        (small ? pids_small : pids_greedy).insert(ran[i]["pid"].get<int>());
    }
    CHECK(last_small < 2 * kSmall + 8);
    CHECK(pids_greedy.size() == 2);  // both processes took part
    CHECK(zcard(conn, "dead") == 0);
}

TEST_CASE("fair fetch daemon: a queue no longer fair is drained at start, in order",
          "[fair_fetch][daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    // Each with its own enqueued_at, as jobs pushed one by one have (a bulk push's jobs may
    // share one: the drain then keeps each tenant's order, not the order across tenants).
    std::vector<std::string> raws;
    for (int i = 0; i < 30; ++i)
        raws.push_back(nlohmann::ordered_json{{"class", "Test::Record"},
                                              {"args", {0, "t" + std::to_string(i % 3)}},
                                              {"queue", "default"},
                                              {"jid", "j" + std::to_string(i)},
                                              {"enqueued_at", 1700000000.0 + i}}
                           .dump());
    kiqd::test::push_raw(conn, "default", raws);
    {
        FairFetchConfig fair;
        FairFetchQueue q;
        q.queue = "default";
        q.arg = 1;
        fair.queues.push_back(q);
        FairSetup s({{"default", 0}}, fair);
        ReliableFetcher fetcher(s.keys, s.order, kIdentity, 1, 1, s.fair());
        fetcher.set_ready();
        std::mt19937_64 rng(1);
        REQUIRE(fetcher.retrieve_work(conn, rng, 0));  // splits all 30, takes one
    }
    REQUIRE(llen(conn, "queue:default@t:t1") == 10);
    // One process, one thread, without fair_fetch: the jobs run in enqueue order again.
    const std::string yaml = kiqd::test::kiqd_config(
        server, "concurrency: 1\nlogging: {level: warn}\nqueues: [default]\n");
    KiqdProcess daemon(KIQD_TEST_DAEMON, yaml);
    CHECK(daemon.wait_for_output("moved its 29 jobs from tenant lists back into queue:default"));
    REQUIRE(wait_until([&] { return ran_count(conn) >= 29; }, std::chrono::seconds(60)));
    CHECK(daemon.stop() == 0);
    const auto ran = kiqd::test::ran_records(conn);
    REQUIRE(ran.size() == 29);
    // Pushed in order t1, t2, t0, t1, ... from job 1 on (job 0, t0, was taken above).
    for (size_t i = 0; i < ran.size(); ++i)
        CHECK(ran[i]["args"][1].get<std::string>() == "t" + std::to_string((i + 1) % 3));
    CHECK(!has_fair_state(conn, Keys(), "default"));
    CHECK(sidekiq_total(conn) == 0);
}

TEST_CASE("fair fetch: Sidekiq 6.4.1's API counts and lists every job of a split queue",
          "[fair_fetch][ruby]") {
    auto [probe, version] =
        kiqd::test::run_command({"/usr/bin/ruby", "-rsidekiq/api", "-e", "print Sidekiq::VERSION"});
    if (probe != 0) {
        WARN("skipped: Ruby with Sidekiq is not installed: " + version);
        return;
    }
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    std::vector<std::string> raws;
    for (int i = 1; i <= 6; ++i) raws.push_back(job("a", i));
    for (int i = 1; i <= 3; ++i) raws.push_back(job("b", i));
    raws.push_back("{oops");
    kiqd::test::push_raw(conn, "default", raws);
    FairSetup s({{"default", 0}}, fair_default());
    BasicFetcher fetcher(s.keys, s.order, 1, 1, s.fair());
    CHECK(fetch_labels(fetcher, conn, 1) == list_of{"a/1"});
    conn.command({"LPUSH", "queue:default", job("c", 1)});  // not split yet
    auto [status, out] =
        kiqd::test::run_command({"/usr/bin/ruby", "-rsidekiq/api", "-e",
                                 "qs = Sidekiq::Queue.all; puts qs.sum(&:size); "
                                 "puts qs.map { |q| \"#{q.name}=#{q.size}\" }.sort.join(' ')"},
                                {{"REDIS_URL", server.url()}});
    INFO(out);
    REQUIRE(status == 0);
    CHECK_THAT(out, Catch::Contains("10\ndefault=1 default@t:=1 default@t:a=5 default@t:b=3"));
}
