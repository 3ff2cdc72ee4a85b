// The C++ client and fair-tenant rerouting against a real Redis: what a push writes (payload
// fields, `queues`, LPUSH / ZADD schedule, bulk), the client-middleware chain (modify, stop),
// the gem's sliding-window decision at its boundaries (trimming, expiry, inclusive bounds, last
// matching rule wins), client-side rerouting, server-side rerouting of jobs pushed by other
// producers (moved, not run, not counted; gem-registered and kiqd-registered jobs left alone),
// `kiqd enqueue`, and a daemon whose handler enqueues follow-up jobs through its client.
#include "middleware/fair_tenant.hpp"

#include <signal.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <regex>

#include "kiqd/client.hpp"
#include "kiqd/clock.hpp"
#include "server/processor.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/temp_dir.hpp"
#include "support/test_daemon_records.hpp"
#include "support/test_runtime.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using kiqd::test::KiqdProcess;
using kiqd::test::llen;
using kiqd::test::lrange;
using kiqd::test::occurrences;
using kiqd::test::RedisServer;
using kiqd::test::run_command;
using kiqd::test::TestRuntime;
using kiqd::test::wait_until;
using kiqd::test::zcard;
using kiqd::test::zrange;
using nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

const std::string kRulesYaml = R"(
handlers:
  SomeJob:
    queue: default
    fair_tenant_queues:
      - {queue: throttled_2x, threshold: 4, per: 3600}
      - {queue: throttled_4x, threshold: 8, per: 60}
    fair_tenant: {arg: 0}
  Test::Record:
    queue: default
    fair_tenant_queues:
      - {queue: throttled, threshold: 3, per: 600}
    fair_tenant: {arg: 1}
)";

const std::string kKey = "sidekiq-fair_tenant:enqueued:SomeJob:tenant:acme";

Config rules_config(const std::string& yaml = kRulesYaml) {
    return parse_config(yaml, "test.yml", "development");
}

json first(redis::Connection& c, const std::string& list) {
    auto items = lrange(c, list);
    REQUIRE_FALSE(items.empty());
    return json::parse(items.back());  // the oldest (LPUSH puts new ones on the left)
}

std::map<std::string, std::string> queue_of_jids(redis::Connection& c,
                                                 const std::vector<std::string>& queues) {
    std::map<std::string, std::string> out;
    for (const auto& q : queues)
        for (const auto& p : lrange(c, "queue:" + q))
            out[json::parse(p)["jid"].get<std::string>()] = q;
    return out;
}

double zscore(redis::Connection& c, const std::string& key, const std::string& member) {
    auto r = c.command({"ZSCORE", key, member});
    REQUIRE_FALSE(r.is_nil());
    return std::stod(std::string(r.str()));
}

class AddField final : public ClientMiddleware {
  public:
    std::string_view name() const override { return "add_field"; }
    void call(ojson& job, redis::Connection&, const ClientNext& next) const override {
        job["traced"] = true;
        next();
    }
};

class StopClass final : public ClientMiddleware {
  public:
    std::string_view name() const override { return "stop"; }
    void call(ojson& job, redis::Connection&, const ClientNext& next) const override {
        if (job["class"] == "Blocked") return;  // not pushed
        next();
    }
};

}  // namespace

TEST_CASE("client: push immediate, at a time and in bulk, as Sidekiq's client",
          "[client][fair_tenant]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto c = server.connect();
    Client client(Keys{}, Compat::v6);
    const double before = epoch_seconds();
    const std::string jid = client.push(c, {{"class", "HardWorker"}, {"args", {1, "two"}}});
    REQUIRE(std::regex_match(jid, std::regex("[0-9a-f]{24}")));
    auto p = first(c, "queue:default");
    CHECK(p["class"] == "HardWorker");
    CHECK(p["args"] == json({1, "two"}));
    CHECK(p["queue"] == "default");
    CHECK(p["retry"] == true);
    CHECK(p["jid"] == jid);
    CHECK(p["created_at"].is_number_float());
    CHECK(p["enqueued_at"].get<double>() >= before);
    CHECK(p["enqueued_at"].get<double>() >= p["created_at"].get<double>());
    CHECK_FALSE(p.contains("at"));
    CHECK(c.command({"SISMEMBER", "queues", "default"}).integer() == 1);

    // At a time: ZADD schedule <at>, without "at" and without "enqueued_at"; no `queues` entry.
    const double at = epoch_seconds() + 3600;
    const std::string sjid =
        client.push(c, {{"class", "HardWorker"}, {"queue", "later"}, {"at", at}});
    auto scheduled = zrange(c, "schedule");
    REQUIRE(scheduled.size() == 1);
    auto s = json::parse(scheduled[0]);
    CHECK(s["jid"] == sjid);
    CHECK_FALSE(s.contains("at"));
    CHECK_FALSE(s.contains("enqueued_at"));
    CHECK(s["queue"] == "later");
    CHECK(zscore(c, "schedule", scheduled[0]) == Approx(at).margin(1e-5));
    CHECK(c.command({"SISMEMBER", "queues", "later"}).integer() == 0);
    // An `at` in the past is an immediate push.
    client.push(c, {{"class", "HardWorker"}, {"queue", "past"}, {"at", epoch_seconds() - 10}});
    CHECK(llen(c, "queue:past") == 1);
    CHECK_FALSE(first(c, "queue:past").contains("at"));

    // Bulk: one pipeline, results aligned with the input.
    std::vector<ojson> jobs;
    for (int i = 0; i < 5; ++i)
        jobs.push_back({{"class", "Bulk"}, {"args", {i}}, {"queue", i % 2 ? "odd" : "even"}});
    auto jids = client.push_bulk(c, jobs);
    REQUIRE(jids.size() == 5);
    CHECK(llen(c, "queue:even") == 3);
    CHECK(llen(c, "queue:odd") == 2);
    CHECK(json::parse(lrange(c, "queue:odd").back())["jid"] == jids[1]);
    CHECK(c.command({"SMEMBERS", "queues"}).size() == 4);  // default, past, even, odd

    CHECK_THROWS_AS(client.push(c, {{"args", {1}}}), std::invalid_argument);
    CHECK_THROWS_AS(client.push(c, {{"class", "X"}, {"args", "no"}}), std::invalid_argument);
}

TEST_CASE("client: the middleware chain may modify a job or stop its push",
          "[client][fair_tenant]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto c = server.connect();
    ClientMiddlewareChain chain;
    chain.add(std::make_shared<AddField>());
    chain.add(std::make_shared<StopClass>());
    Client client(Keys{}, Compat::v6, chain, {{"Routed", "special"}});
    const std::string jid = client.push(c, {{"class", "Routed"}});
    CHECK_FALSE(jid.empty());
    auto p = first(c, "queue:special");  // the class's queue
    CHECK(p["traced"] == true);
    CHECK(client.push(c, {{"class", "Blocked"}}).empty());
    auto jids = client.push_bulk(c, {{{"class", "Blocked"}}, {{"class", "Fine"}}});
    REQUIRE(jids.size() == 2);
    CHECK(jids[0].empty());
    CHECK_FALSE(jids[1].empty());
    CHECK(llen(c, "queue:default") == 1);
    CHECK(json::parse(lrange(c, "queue:default")[0])["class"] == "Fine");
    CHECK(c.command({"SISMEMBER", "queues", "special"}).integer() == 1);
}

TEST_CASE("fair tenant: the gem's window — trimming, expiry, inclusive bounds, last rule wins",
          "[fair_tenant]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto c = server.connect();
    Config config = rules_config(R"(
handlers:
  SomeJob:
    queue: default
    fair_tenant_queues:
      - {queue: slow, threshold: 2, per: 100}
      - {queue: slower, threshold: 1, per: 10}
fair_tenant: {max_throttling_window: 1000}
)");
    FairTenant fair(config, Keys{});
    const double now = 1800000000.75;  // a fixed clock: every bound is exact
    const long long t = 1800000000;
    auto plan = fair.plan(json{{"class", "SomeJob"}, {"fair_tenant", "acme"}}, "default");
    REQUIRE(plan);
    const std::string key = plan->key;
    CHECK(key == kKey);
    // History: one entry at exactly now-1000 (trimmed: the gem's bound is inclusive), one just
    // inside the max window, one at exactly now-100 (counted by the 100 s rule), one at
    // now-11 (outside the 10 s rule) and none within 10 s.
    c.command({"ZADD", key, std::to_string(t - 1000), "jid:old", std::to_string(t - 999),
               "jid:kept", std::to_string(t - 100), "jid:edge", std::to_string(t - 11),
               "jid:eleven"});
    // This job: 100 s window holds edge, eleven and itself = 3 > 2 → slow; 10 s window holds
    // itself only = 1, not > 1 → slower does not match.
    CHECK(fair.register_and_decide(c, *plan, "J1", now) == 1);
    CHECK(c.command({"ZSCORE", key, "jid:old"}).is_nil());
    CHECK(zscore(c, key, "jid:kept") == t - 999);
    CHECK(zscore(c, key, "jid:J1") == t);  // integer seconds
    const long long ttl = c.command({"TTL", key}).integer();
    CHECK(ttl > 990);
    CHECK(ttl <= 1000);
    // A second job in the same second: the 10 s window holds 2 > 1 → both rules match and the
    // LAST one wins.
    CHECK(fair.register_and_decide(c, *plan, "J2", now) == 2);
    // Re-registering a jid moves its score (ZADD), it is not counted twice. One second later
    // "kept" (t-999) falls out of the 1000 s window.
    CHECK(fair.register_and_decide(c, *plan, "J2", now + 1) == 2);
    CHECK(zscore(c, key, "jid:J2") == t + 1);
    CHECK(zrange(c, key) == std::vector<std::string>{"jid:edge", "jid:eleven", "jid:J1", "jid:J2"});
    // 200 s later nothing but the new job is within 100 s.
    CHECK(fair.register_and_decide(c, *plan, "J3", now + 200) == 0);
    // Far later everything but the new one is trimmed.
    CHECK(fair.register_and_decide(c, *plan, "J4", now + 5000) == 0);
    CHECK(zrange(c, key) == std::vector<std::string>{"jid:J4"});
}

// Rule 1: more than 1 in 500 s → slower; rule 2: more than 3 in the max window → slow. Read at
// the fixed clock kNow (kT its whole second).
const std::string kTwoRulesYaml =
    "handlers: {SomeJob: {queue: default, fair_tenant_queues: [{queue: slower, threshold: 1, "
    "per: 500}, {queue: slow, threshold: 3}]}}\nfair_tenant: {max_throttling_window: 1000}\n";
constexpr double kNow = 1800000000.75;
constexpr long long kT = 1800000000;

const FairTenant& two_rules() {
    static const Config config = rules_config(kTwoRulesYaml);
    static const FairTenant fair(config, Keys{});
    return fair;
}

TEST_CASE("fair tenant: the server's first call counts before writing, as the script counts after",
          "[fair_tenant]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto c = server.connect();
    const FairTenant& fair = two_rules();
    // The same history for two tenants: one at exactly now-1000 (the trim drops it, so the
    // max-window rule 2 counts 3, not 4: no match), one inside it, one at exactly now-500 (the
    // 500 s rule 1 counts it: 2 > 1, a match). Counting the trimmed entry would pick rule 2.
    std::vector<std::string> keys;
    for (const char* tenant : {"acme", "other"}) {
        auto plan = fair.plan(json{{"class", "SomeJob"}, {"fair_tenant", tenant}}, "default");
        REQUIRE(plan);
        keys.push_back(plan->key);
        c.command({"ZADD", plan->key, std::to_string(kT - 1000), "jid:old",
                   std::to_string(kT - 999), "jid:kept", std::to_string(kT - 500), "jid:edge"});
    }
    auto acme = fair.plan(json{{"class", "SomeJob"}, {"fair_tenant", "acme"}}, "default");
    auto other = fair.plan(json{{"class", "SomeJob"}, {"fair_tenant", "other"}}, "default");
    // The script that writes first and counts after decides rule 1.
    CHECK(fair.register_and_decide(c, *other, "J", kNow) == 1);
    // The first call: rule 1 would move the job, so it writes nothing and asks for payloads.
    CHECK(fair.register_unless_moved(c, *acme, "J", kNow, {true, true}) == -2);
    CHECK(c.command({"ZSCORE", keys[0], "jid:J"}).is_nil());
    CHECK(c.command({"ZCARD", keys[0]}).integer() == 3);  // not even trimmed
    // A rule whose queue is the job's own does not move it: registered, trimmed, same answer.
    CHECK(fair.register_unless_moved(c, *acme, "J", kNow, {false, true}) == 1);
    CHECK(zrange(c, keys[0]) == zrange(c, keys[1]));
    CHECK(c.command({"TTL", keys[0]}).integer() > 990);
    // Registered now: a second run of that jid is left alone.
    CHECK(fair.register_unless_moved(c, *acme, "J", kNow, {true, true}) == -1);
}

// The probe (fair_probe, fair_tenant.hpp) skips the ZCOUNT of a rule whose threshold is at
// least ZCARD + 1, and on an absent key the ZSCORE, the ZCOUNTs and the trim. Across histories
// of 0 to 4 entries (one the trim drops, one outside the 500 s rule, one on its edge) and
// thresholds around each history's size, it must decide and write exactly as the client mode,
// which always trims, writes and counts every rule.
TEST_CASE("fair tenant: the probe's shortcuts decide and write as the full count does",
          "[fair_tenant]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto c = server.connect();
    const FairTenant& fair = two_rules();
    const std::vector<long long> history{kT - 1000, kT - 999, kT - 500, kT - 10};
    auto with_scores = [&](const std::string& key) {
        std::vector<std::string> out;
        auto r = c.command({"ZRANGE", key, "0", "-1", "WITHSCORES"});
        for (size_t i = 0; i < r.size(); ++i) out.emplace_back(r[i].str());
        return out;
    };
    size_t cases = 0, matched = 0;
    for (size_t h = 0; h <= history.size(); ++h) {
        const double n = static_cast<double>(h);
        const std::vector<double> thresholds{-1, 0, 0.5, n - 1, n, n + 0.5, n + 1};
        for (double first : thresholds) {
            for (double second : thresholds) {
                std::map<std::string, FairTenantPlan> plans;
                for (const char* tenant : {"moved", "stays", "client"}) {
                    auto plan =
                        fair.plan(json{{"class", "SomeJob"}, {"fair_tenant", tenant}}, "default");
                    REQUIRE(plan);
                    plan->rules[0].threshold = first;
                    plan->rules[1].threshold = second;
                    c.command({"DEL", plan->key});
                    for (size_t i = 0; i < h; ++i)
                        c.command({"ZADD", plan->key, std::to_string(history[i]),
                                   "jid:h" + std::to_string(i)});
                    plans.emplace(tenant, std::move(*plan));
                }
                INFO("history " << h << ", thresholds " << first << ", " << second);
                const auto before = with_scores(plans["moved"].key);
                const long long moved =
                    fair.register_unless_moved(c, plans["moved"], "J", kNow, {true, true});
                const long long stays =
                    fair.register_unless_moved(c, plans["stays"], "J", kNow, {false, false});
                const auto expected =
                    static_cast<long long>(fair.register_and_decide(c, plans["client"], "J", kNow));
                CHECK(stays == expected);
                CHECK(moved == (expected > 0 ? -2 : 0));
                CHECK(with_scores(plans["stays"].key) == with_scores(plans["client"].key));
                CHECK(c.command({"TTL", plans["stays"].key}).integer() > 990);
                if (expected > 0) {
                    CHECK(with_scores(plans["moved"].key) == before);  // nothing written
                    ++matched;
                } else {
                    CHECK(with_scores(plans["moved"].key) == with_scores(plans["client"].key));
                }
                ++cases;
            }
        }
    }
    CHECK(matched > 0);
    CHECK(matched < cases);
}

// The probe's type check is its ZCARD's WRONGTYPE: a key of another type still answers the
// guard's error, naming the key, with nothing written.
TEST_CASE("fair tenant: the server probe refuses an enqueues key of another type",
          "[fair_tenant]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto c = server.connect();
    Config config = rules_config();
    FairTenant fair(config, Keys{});
    auto plan = fair.plan(json{{"class", "SomeJob"}, {"args", {"acme"}}}, "default");
    REQUIRE(plan);
    c.command({"SET", plan->key, "not a zset"});
    CHECK_THROWS_WITH(fair.register_unless_moved(c, *plan, "J", epoch_seconds(), {true, true}),
                      Catch::Contains("WRONGTYPE " + plan->key + " holds a string, not a zset"));
    CHECK(c.command({"GET", plan->key}).str() == "not a zset");
    CHECK(c.command({"TTL", plan->key}).integer() == -1);
}

TEST_CASE("fair tenant: kiqd's client reroutes a greedy tenant and marks its jobs",
          "[fair_tenant][client]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto c = server.connect();
    Client client = make_process_client(rules_config());
    std::vector<std::string> jids;
    for (int i = 0; i < 12; ++i)
        jids.push_back(client.push(c, {{"class", "SomeJob"}, {"args", {"acme", i}}}));
    client.push(c, {{"class", "SomeJob"}, {"args", {"small"}}});
    auto where = queue_of_jids(c, {"default", "throttled_2x", "throttled_4x"});
    // threshold 4 per hour: jobs 5.. go to throttled_2x; threshold 8 per minute (the last
    // rule): jobs 9.. go to throttled_4x.
    for (int i = 0; i < 12; ++i) {
        INFO("job " << i);
        CHECK(where[jids[i]] == (i < 4 ? "default" : i < 8 ? "throttled_2x" : "throttled_4x"));
    }
    CHECK(llen(c, "queue:default") == 5);  // 4 of acme + the small tenant's
    auto p = json::parse(lrange(c, "queue:throttled_4x").front());
    CHECK(p["queue"] == "throttled_4x");
    CHECK(p["fair_tenant"] == "acme");
    CHECK(p[kFairTenantRegistered] == true);
    CHECK(zcard(c, kKey) == 12);
    CHECK(zcard(c, "sidekiq-fair_tenant:enqueued:SomeJob:tenant:small") == 1);
    CHECK(c.command({"SISMEMBER", "queues", "throttled_4x"}).integer() == 1);
    // Explicit tenant (--tenant / SomeJob.set(fair_tenant:)) wins over args[0].
    client.push(c, {{"class", "SomeJob"}, {"args", {"acme"}}, {"fair_tenant", "globex"}});
    CHECK(zcard(c, "sidekiq-fair_tenant:enqueued:SomeJob:tenant:globex") == 1);
    // A job already in another queue (rerouted before, a retry) is left alone.
    const std::string moved =
        client.push(c, {{"class", "SomeJob"}, {"args", {"acme"}}, {"queue", "throttled_2x"}});
    CHECK(zcard(c, kKey) == 12);
    CHECK(queue_of_jids(c, {"throttled_2x"}).count(moved) == 1);
    CHECK_FALSE(
        json::parse(lrange(c, "queue:throttled_2x").front()).contains(kFairTenantRegistered));
    // Scheduled jobs are registered (and rerouted) at push time, as the gem does.
    const std::string later =
        client.push(c, {{"class", "SomeJob"}, {"args", {"acme"}}, {"at", epoch_seconds() + 600}});
    CHECK(c.command({"ZSCORE", kKey, "jid:" + later}).is_nil() == false);
    CHECK(json::parse(zrange(c, "schedule").at(0))["queue"] == "throttled_4x");
}

TEST_CASE("fair tenant: server side — jobs of other producers are registered and moved",
          "[fair_tenant][server]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto c = server.connect();
    TestRuntime t(server, {{"default", 0}});
    Config config = rules_config();
    t.config.classes = config.classes;
    t.chain.add(std::make_shared<FairTenantServerMiddleware>(t.config, t.keys));
    t.handlers.add("SomeJob", [&](const Job& job, JobContext& ctx) {
        ctx.redis.command({"RPUSH", "ran", job.jid});
    });
    // As Ruby without the gem (or redis-cli) pushes: no marker, no fair_tenant field.
    auto raw = [](const std::string& jid, const std::string& tenant) {
        return R"({"retry":true,"queue":"default","args":[")" + tenant +
               R"(",7],"class":"SomeJob","jid":")" + jid +
               R"(","created_at":1795312741.335896,"enqueued_at":1795312741.336079})";
    };
    Processor p(t.rt, 0, {});
    std::mt19937_64 rng(1);
    auto run_one = [&](const std::string& payload) {
        c.command({"LPUSH", "queue:default", payload});
        auto unit = t.fetcher.retrieve_work(c, rng, 0);
        REQUIRE(unit);
        p.process(c, std::move(*unit));
    };
    for (int i = 0; i < 6; ++i) run_one(raw("S" + std::to_string(i), "acme"));
    // threshold 4: the first four ran; the 5th and 6th were moved to throttled_2x, unrun.
    CHECK(lrange(c, "ran") == std::vector<std::string>{"S0", "S1", "S2", "S3"});
    CHECK(t.work.processed == 4);
    CHECK(t.work.failed == 0);
    auto moved = lrange(c, "queue:throttled_2x");
    REQUIRE(moved.size() == 2);
    // The moved payload is the original one with queue, fair_tenant and the marker set; every
    // other member byte for byte.
    CHECK(
        moved[1] ==
        R"({"retry":true,"queue":"throttled_2x","args":["acme",7],"class":"SomeJob","jid":"S4","created_at":1795312741.335896,"enqueued_at":1795312741.336079,"fair_tenant":"acme","fair_tenant_registered":true})");
    CHECK(c.command({"SISMEMBER", "queues", "throttled_2x"}).integer() == 1);
    CHECK(zcard(c, kKey) == 6);
    CHECK(zrange(c, "retry").empty());
    CHECK(zrange(c, "dead").empty());
    CHECK_THAT(t.logs(), Catch::Contains("jid=S4 tenant=acme over its fair share: moved from "
                                         "queue:default to queue:throttled_2x"));

    // A job kiqd's client registered (the marker) is not registered again, and runs.
    run_one(
        R"({"queue":"default","args":["acme"],"class":"SomeJob","jid":"K1","fair_tenant_registered":true})");
    CHECK(zcard(c, kKey) == 6);
    // A job the gem registered (its jid is in the window) is left alone, and runs.
    c.command({"ZADD", kKey, "1", "jid:G1"});
    run_one(raw("G1", "acme"));
    CHECK(zscore(c, kKey, "jid:G1") == 1);
    CHECK(lrange(c, "ran").back() == "G1");
    // A moved job, fetched from the throttled queue, runs there.
    TestRuntime t2(server, {{"throttled_2x", 0}});
    t2.config.classes = config.classes;
    t2.chain.add(std::make_shared<FairTenantServerMiddleware>(t2.config, t2.keys));
    t2.handlers.add("SomeJob", [&](const Job& job, JobContext& ctx) {
        ctx.redis.command({"RPUSH", "ran", job.jid + "@" + job.queue});
    });
    Processor p2(t2.rt, 0, {});
    for (int i = 0; i < 2; ++i) {
        auto unit = t2.fetcher.retrieve_work(c, rng, 0);
        REQUIRE(unit);
        p2.process(c, std::move(*unit));
    }
    CHECK(lrange(c, "ran").back() == "S5@throttled_2x");
    CHECK(t2.work.processed == 2);
    // Unusable fair_tenant_queues in a payload never fail the job: it runs where it is, and the
    // class is warned about once, however many of its jobs carry them.
    const long long failed_before = t.work.failed;
    run_one(
        R"({"retry":true,"queue":"default","args":["acme"],"class":"SomeJob","jid":"BAD","fair_tenant_queues":"x"})");
    run_one(
        R"({"retry":true,"queue":"default","args":["acme"],"class":"SomeJob","jid":"BAD2","fair_tenant_queues":[{"queue":"q","threshold":"many"}]})");
    CHECK(zcard(c, "retry") == 0);
    CHECK(t.work.failed == failed_before);
    CHECK(lrange(c, "ran").back() == "BAD2");
    CHECK(occurrences(t.logs(), "fair-tenant rules cannot be used") == 1);
    CHECK_THAT(t.logs(), Catch::Contains("fair_tenant_queues must be an array"));
}

// sidekiq-fair_tenant's README writes `per: 1.hour`; with ActiveSupport loaded, Sidekiq stores
// it as the string "3600". The gem accepts it, so kiqd does: the rule applies with a one-hour
// window, and the job is not failed.
TEST_CASE("fair tenant: a rule's per and threshold may be numeric strings (per: 1.hour)",
          "[fair_tenant]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto c = server.connect();
    TestRuntime t(server, {{"default", 0}});
    t.chain.add(std::make_shared<FairTenantServerMiddleware>(t.config, t.keys));
    t.handlers.add("HourJob", [&](const Job& job, JobContext& ctx) {
        ctx.redis.command({"RPUSH", "ran", job.jid});
    });
    Processor p(t.rt, 0, {});
    std::mt19937_64 rng(1);
    auto push = [&](const std::string& jid) {
        c.command(
            {"LPUSH", "queue:default",
             R"({"queue":"default","args":["acme"],"class":"HourJob","jid":")" + jid +
                 R"(","fair_tenant":"acme","fair_tenant_queues":[{"queue":"slow","threshold":"1","per":"3600"}]})"});
        auto unit = t.fetcher.retrieve_work(c, rng, 0);
        REQUIRE(unit);
        p.process(c, std::move(*unit));
    };
    push("H1");
    push("H2");
    // threshold 1 per hour: the first runs, the second goes to `slow`.
    CHECK(lrange(c, "ran") == std::vector<std::string>{"H1"});
    CHECK(llen(c, "queue:slow") == 1);
    CHECK(t.work.failed == 0);
    CHECK(zcard(c, "retry") == 0);
}

TEST_CASE("fair tenant: kiqd enqueue — args as JSON, --queue, --at, --tenant, errors",
          "[fair_tenant][cli]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto c = server.connect();
    const kiqd::test::TempDir dir;
    const std::string cfg = dir.write("kiqd.yml", kiqd::test::kiqd_config(server, kRulesYaml));
    auto enqueue = [&](std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
        std::vector<std::string> argv{KIQD_BINARY, "enqueue"};
        argv.insert(argv.end(), args.begin(), args.end());
        return run_command(argv, env);
    };
    auto [code, out] = enqueue({"-C", cfg, "HardWorker", "1", R"("two")", R"({"three":[3]})"});
    CHECK(code == 0);
    std::smatch m;
    REQUIRE(std::regex_search(out, m, std::regex("^([0-9a-f]{24})\n$")));
    auto p = first(c, "queue:default");
    CHECK(p["jid"] == m[1].str());
    CHECK(p["class"] == "HardWorker");
    CHECK(p["args"] == json({1, "two", {{"three", {3}}}}));
    CHECK(p["enqueued_at"].is_number());

    std::tie(code, out) = enqueue({"-C", cfg, "HardWorker", "--queue", "critical", "--at", "+1h"});
    CHECK(code == 0);
    auto s = json::parse(zrange(c, "schedule").at(0));
    CHECK(s["queue"] == "critical");
    CHECK(zscore(c, "schedule", zrange(c, "schedule").at(0)) ==
          Approx(epoch_seconds() + 3600).margin(30));

    // Without -C: REDIS_URL, as the daemon.
    std::tie(code, out) = enqueue({"Plain", "--", "-5"}, {{"REDIS_URL", server.url()}});
    CHECK(code == 0);
    CHECK(json::parse(lrange(c, "queue:default").front())["args"] == json({-5}));

    // --tenant with the YAML's rules for Test::Record (threshold 3 per 600 s → throttled).
    std::vector<std::string> where;
    for (int i = 0; i < 5; ++i) {
        std::tie(code, out) = enqueue({"-C", cfg, "Test::Record", "0", "--tenant", "bigco"});
        REQUIRE(code == 0);
        where.push_back(llen(c, "queue:throttled") > 0 ? "throttled" : "default");
    }
    CHECK(where ==
          std::vector<std::string>{"default", "default", "default", "throttled", "throttled"});
    CHECK(json::parse(lrange(c, "queue:throttled").front())["fair_tenant"] == "bigco");

    // Bad input: a clear message and a non-zero exit; nothing pushed.
    const long long before = llen(c, "queue:default");
    std::tie(code, out) = enqueue({"-C", cfg, "HardWorker", "1", "{oops"});
    CHECK(code == 64);
    CHECK_THAT(out, Catch::Contains("ARG_JSON 2 ({oops) is not valid JSON"));
    std::tie(code, out) = enqueue({"-C", cfg, "HardWorker", "text"});
    CHECK(code == 64);
    CHECK_THAT(out, Catch::Contains("ARG_JSON 1 (text) is not valid JSON"));
    std::tie(code, out) = enqueue({"-C", cfg, "HardWorker", "--at", "soon"});
    CHECK(code == 64);
    CHECK_THAT(out, Catch::Contains("--at 'soon' is not a time"));
    CHECK(llen(c, "queue:default") == before);
    std::tie(code, out) = enqueue({"-C", cfg});
    CHECK(code == 64);  // CLASS is required (CLI11 usage error)
    std::tie(code, out) = enqueue({"HardWorker"}, {{"REDIS_URL", "redis://127.0.0.1:1/0"}});
    CHECK(code == 69);
}

TEST_CASE("fair tenant: a daemon reroutes foreign pushes and its handlers' follow-up jobs",
          "[fair_tenant][daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto c = server.connect();
    // 8 jobs of tenant "big" pushed as another producer would (no marker), then one job whose
    // handler enqueues 5 follow-ups for tenant "spawned" through the process's client.
    Client plain(Keys{}, Compat::v6);
    for (int i = 0; i < 8; ++i) plain.push(c, {{"class", "Test::Record"}, {"args", {0, "big", i}}});
    ojson follow = ojson::array();
    for (int i = 0; i < 5; ++i)
        follow.push_back({{"class", "Test::Record"}, {"args", {0, "spawned", i}}});
    plain.push(c, {{"class", "Test::Spawn"}, {"args", {follow}}});
    KiqdProcess kiqd(KIQD_TEST_DAEMON,
                     kiqd::test::kiqd_config(server,
                                             "concurrency: 1\nqueues: [[default, 3], "
                                             "[throttled, 1]]\n" +
                                                 kRulesYaml));
    REQUIRE(wait_until([&] { return kiqd::test::ran_count(c) >= 14; }, std::chrono::seconds(30)));
    CHECK(kiqd.stop() == 0);
    std::map<std::string, std::map<std::string, int>> by_tenant;  // tenant → queue → count
    for (auto& j : kiqd::test::ran_records(c)) {
        if (j["class"] != "Test::Record") continue;
        by_tenant[j["args"][1].get<std::string>()][j["queue"].get<std::string>()]++;
    }
    // Threshold 3: three of each tenant ran from default, the rest from throttled; none lost.
    CHECK(by_tenant["big"]["default"] == 3);
    CHECK(by_tenant["big"]["throttled"] == 5);
    CHECK(by_tenant["spawned"]["default"] == 3);
    CHECK(by_tenant["spawned"]["throttled"] == 2);
    auto spawned = json::parse(lrange(c, "kiqd-test:spawned").at(0));
    CHECK(spawned.size() == 5);
    CHECK(zcard(c, "sidekiq-fair_tenant:enqueued:Test::Record:tenant:spawned") == 5);
    CHECK(zcard(c, "sidekiq-fair_tenant:enqueued:Test::Record:tenant:big") == 8);
    // Moved jobs count once, when they run: 13 records + the spawner.
    CHECK(c.command({"GET", "stat:processed"}).str() == "14");
    CHECK(zrange(c, "retry").empty());
    CHECK(zrange(c, "dead").empty());
}
