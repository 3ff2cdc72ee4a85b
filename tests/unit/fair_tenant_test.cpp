// Fair-tenant rerouting without Redis: the YAML keys (and their ConfigErrors), the gem's key
// format, and which jobs get registered with which tenant and rules (the gem's enabled? /
// tenant_id / original_queue logic). The Redis side of the decision is in
// tests/integration/fair_tenant_test.cpp. Also `kiqd enqueue --at` parsing.
#include "middleware/fair_tenant.hpp"

#include <catch2/catch.hpp>

#include "admin/admin.hpp"
#include "config/enqueues_key.hpp"
#include "kiqd/client.hpp"
#include "support/config_errors.hpp"
#include "support/job_of.hpp"

using namespace kiqd;
using nlohmann::json;

using kiqd::test::config_error_of;
namespace {

const char* kYaml = R"(
queues: [[default, 6], [throttled_2x, 3], [throttled_4x, 1]]
handlers:
  SomeJob:
    queue: default
    fair_tenant_queues:
      - {queue: throttled_2x, threshold: 100, per: 3600}
      - {queue: throttled_4x, threshold: 10, per: 60}
    fair_tenant: {arg: 0}
  NoQueueJob:
    fair_tenant_queues: [{queue: slow, threshold: 5}]
  OnlyQueue:
    queue: critical
fair_tenant:
  max_throttling_window: 7200
)";

}  // namespace

TEST_CASE("fair tenant: handlers queue/fair_tenant_queues/fair_tenant and fair_tenant: keys",
          "[fair_tenant][config]") {
    auto c = parse_config(kYaml, "test.yml", "development");
    const auto& s = c.classes.at("SomeJob");
    CHECK(s.queue == "default");
    REQUIRE(s.fair_tenant_queues.size() == 2);
    CHECK(s.fair_tenant_queues[0].queue == "throttled_2x");
    CHECK(s.fair_tenant_queues[0].threshold == 100);
    CHECK(s.fair_tenant_queues[0].per == 3600);
    CHECK(s.fair_tenant_queues[1].queue == "throttled_4x");
    CHECK(s.fair_tenant_queues[1].per == 60);
    CHECK(s.fair_tenant_arg == 0);
    const auto& n = c.classes.at("NoQueueJob");
    CHECK(n.queue.empty());
    CHECK_FALSE(n.fair_tenant_queues.at(0).per.has_value());
    CHECK_FALSE(n.fair_tenant_arg.has_value());
    CHECK(c.classes.at("OnlyQueue").queue == "critical");
    CHECK(c.fair_tenant.max_throttling_window == 7200);
    CHECK(c.fair_tenant.enqueues_key ==
          "sidekiq-fair_tenant:enqueued:%<job_class>s:tenant:%<fair_tenant>s");
}

TEST_CASE("fair tenant: bad values are ConfigErrors naming the key", "[fair_tenant][config]") {
    CHECK_THAT(config_error_of("handlers:\n  A:\n    queue: ''\n"),
               Catch::Contains("handlers.A.queue") && Catch::Contains("empty"));
    CHECK_THAT(config_error_of("handlers:\n  A:\n    fair_tenant_queues: {queue: x}\n"),
               Catch::Contains("handlers.A.fair_tenant_queues") && Catch::Contains("list"));
    CHECK_THAT(config_error_of("handlers:\n  A:\n    fair_tenant_queues: []\n"),
               Catch::Contains("handlers.A.fair_tenant_queues") && Catch::Contains("empty"));
    CHECK_THAT(
        config_error_of("handlers:\n  A:\n    fair_tenant_queues: [{threshold: 1}]\n"),
        Catch::Contains("handlers.A.fair_tenant_queues[0].queue") && Catch::Contains("required"));
    CHECK_THAT(config_error_of("handlers:\n  A:\n    fair_tenant_queues: [{queue: q}]\n"),
               Catch::Contains("handlers.A.fair_tenant_queues[0].threshold"));
    CHECK_THAT(
        config_error_of("handlers:\n  A:\n    fair_tenant_queues: [{queue: q, threshold: -1}]\n"),
        Catch::Contains("fair_tenant_queues[0].threshold"));
    CHECK_THAT(config_error_of(
                   "handlers:\n  A:\n    fair_tenant_queues: [{queue: q, threshold: 1, per: 0}]\n"),
               Catch::Contains("fair_tenant_queues[0].per") && Catch::Contains("line 3"));
    CHECK_THAT(config_error_of(
                   "handlers:\n  A:\n    fair_tenant_queues: [{queue: q, threshold: 1, pr: 5}]\n"),
               Catch::Contains("fair_tenant_queues[0].pr") && Catch::Contains("unknown key"));
    CHECK_THAT(config_error_of("handlers:\n  A:\n    fair_tenant: tenant_1\n"),
               Catch::Contains("handlers.A.fair_tenant") && Catch::Contains("arg"));
    CHECK_THAT(config_error_of("handlers:\n  A:\n    fair_tenant: {arg: -1}\n"),
               Catch::Contains("handlers.A.fair_tenant.arg"));
    CHECK_THAT(config_error_of("handlers:\n  A:\n    fair_tenant: {arg: x}\n"),
               Catch::Contains("handlers.A.fair_tenant.arg") && Catch::Contains("integer"));
    CHECK_THAT(config_error_of("fair_tenant:\n  max_throttling_window: 0\n"),
               Catch::Contains("fair_tenant.max_throttling_window"));
    CHECK_THAT(config_error_of("fair_tenant:\n  enqueues_key: 'x:%<tenant>s'\n"),
               Catch::Contains("fair_tenant.enqueues_key") && Catch::Contains("placeholders"));
    CHECK_THAT(config_error_of("fair_tenant:\n  window: 5\n"),
               Catch::Contains("fair_tenant.window") && Catch::Contains("unknown key"));
}

TEST_CASE("fair tenant: the gem's enqueues_key format", "[fair_tenant]") {
    const std::string def = "sidekiq-fair_tenant:enqueued:%<job_class>s:tenant:%<fair_tenant>s";
    CHECK_FALSE(enqueues_key_problem(def));
    CHECK(format_enqueues_key(def, "default", "SomeJob", "acme") ==
          "sidekiq-fair_tenant:enqueued:SomeJob:tenant:acme");
    CHECK(format_enqueues_key("ft:%<queue>s:%<fair_tenant>s:100%%", "q", "C", "t") ==
          "ft:q:t:100%");
    CHECK(enqueues_key_problem("ft:%s"));
    CHECK(enqueues_key_problem("ft:%<tenant>s"));
    CHECK(enqueues_key_problem(""));
}

TEST_CASE("fair tenant: a fetched job's plan, read from its members, is its tree's plan",
          "[fair_tenant][memory]") {
    // The server side reads a few members and the tenant argument alone (never the tree); it
    // must decide as the tree would, ActiveJob's nesting and every odd shape included.
    Config c = parse_config(kYaml, "test.yml", "development");
    FairTenant fair(c, Keys("ns"));
    const std::string wrapper = "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper";
    const std::vector<json> jobs = {
        {{"class", "SomeJob"}, {"args", {"acme", 5}}},
        {{"class", "SomeJob"}, {"args", {{{"k", 1}}, 5}}},
        {{"class", "SomeJob"}, {"args", {nullptr}}},
        {{"class", "SomeJob"}, {"args", json::array()}, {"apartment", "ap1"}},
        {{"class", "SomeJob"}, {"args", {"a"}}, {"fair_tenant", false}},
        {{"class", "SomeJob"}, {"args", {"a"}}, {"fair_tenant", 7}},
        {{"class", wrapper}, {"wrapped", "SomeJob"}, {"args", {{{"arguments", {"t9", 1}}}}}},
        {{"class", wrapper}, {"wrapped", "SomeJob"}, {"args", {{{"arguments", "x"}}}}},
        {{"class", wrapper}, {"wrapped", "SomeJob"}, {"args", {{{"job_class", "SomeJob"}}}}},
        {{"class", wrapper}, {"wrapped", "SomeJob"}, {"args", {"plain", 2}}},
        {{"class", wrapper}, {"wrapped", "SomeJob"}, {"args", json::array()}},
        {{"class", wrapper}, {"wrapped", ""}, {"args", {{{"arguments", {"t"}}}}}},
        {{"class", "Other"},
         {"fair_tenant", "t"},
         {"fair_tenant_queues", {{{"queue", "q2"}, {"threshold", 3}}}}},
        {{"class", "SomeJob"}, {"args", {"acme"}}, {"fair_tenant_queues", json::array()}},
        {{"class", "NoQueueJob"}, {"fair_tenant", "t"}},
        {{"class", "Unknown"}, {"fair_tenant", "t"}},
        // Tenant arguments of every scalar shape: the usual ones (a string without escapes,
        // a non-negative integer of up to 18 digits) are read without the parser.
        {{"class", "SomeJob"}, {"args", {"a\"b\\c\u00e9\n"}}},
        {{"class", "SomeJob"}, {"args", {""}}},
        {{"class", "SomeJob"}, {"args", {0}}},
        {{"class", "SomeJob"}, {"args", {123456789012345678ULL}}},
        {{"class", "SomeJob"}, {"args", {1234567890123456789ULL}}},
        {{"class", "SomeJob"}, {"args", {18446744073709551615ULL}}},
        {{"class", "SomeJob"}, {"args", {json::parse("99999999999999999999")}}},
        {{"class", "SomeJob"}, {"args", {-3}}},
        {{"class", "SomeJob"}, {"args", {1.5}}},
        {{"class", "SomeJob"}, {"args", {true}}},
    };
    for (const auto& tree : jobs) {
        for (const std::string queue : {"default", "throttled_2x", "slow"}) {
            INFO(tree.dump() << " in " << queue);
            const Job job = kiqd::test::job_of(tree.dump(), queue);
            const auto expected = fair.plan(tree, queue);
            const auto plan = fair.plan(job);
            REQUIRE(plan.has_value() == expected.has_value());
            if (!plan) continue;
            CHECK(plan->tenant == expected->tenant);
            CHECK(plan->tenant_value == expected->tenant_value);
            CHECK(plan->tenant_value.dump() == expected->tenant_value.dump());
            CHECK(plan->key == expected->key);
            CHECK(plan->job_class == expected->job_class);
            CHECK(plan->rules.size() == expected->rules.size());
        }
    }
    // A malformed fair_tenant_queues is refused either way.
    const json bad{{"class", "Other"}, {"fair_tenant", "t"}, {"fair_tenant_queues", {1}}};
    CHECK_THROWS_AS(fair.plan(bad, "default"), std::invalid_argument);
    CHECK_THROWS_AS(fair.plan(kiqd::test::job_of(bad.dump())), std::invalid_argument);
}

TEST_CASE("fair tenant: which jobs are registered, with which tenant, key and rules",
          "[fair_tenant]") {
    Config c = parse_config(kYaml, "test.yml", "development");
    FairTenant fair(c, Keys("ns"));

    SECTION("tenant from args[N] of the class's fair_tenant: {arg: N}; YAML rules") {
        auto plan = fair.plan(json{{"class", "SomeJob"}, {"args", {"acme", 5}}}, "default");
        REQUIRE(plan);
        CHECK(plan->tenant == "acme");
        CHECK(plan->job_class == "SomeJob");
        CHECK(plan->key == "ns:sidekiq-fair_tenant:enqueued:SomeJob:tenant:acme");
        REQUIRE(plan->rules.size() == 2);
        CHECK(plan->rules[1].queue == "throttled_4x");
    }
    SECTION("an integer tenant prints as Ruby's to_s") {
        auto plan = fair.plan(json{{"class", "SomeJob"}, {"args", {42}}}, "default");
        REQUIRE(plan);
        CHECK(plan->tenant == "42");
        CHECK(plan->tenant_value == 42);
    }
    SECTION("the job's fair_tenant wins over args; then apartment") {
        auto plan = fair.plan(
            json{{"class", "SomeJob"}, {"args", {"acme"}}, {"fair_tenant", "globex"}}, "default");
        REQUIRE(plan);
        CHECK(plan->tenant == "globex");
        plan = fair.plan(json{{"class", "SomeJob"}, {"args", json::array()}, {"apartment", "ap1"}},
                         "default");
        REQUIRE(plan);
        CHECK(plan->tenant == "ap1");
        // nil / false are no tenant (Ruby truthiness): not registered.
        CHECK_FALSE(fair.plan(json{{"class", "SomeJob"}, {"args", {nullptr}}}, "default"));
        CHECK_FALSE(fair.plan(json{{"class", "SomeJob"}, {"args", {false}}}, "default"));
        // `fair_tenant: false` is no tenant either: the class's source is asked (||=).
        plan = fair.plan(json{{"class", "SomeJob"}, {"args", {"a"}}, {"fair_tenant", false}},
                         "default");
        REQUIRE(plan);
        CHECK(plan->tenant == "a");
    }
    SECTION("ActiveJob: the class is `wrapped`, the arguments are args[0].arguments") {
        auto plan =
            fair.plan(json{{"class", "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"},
                           {"wrapped", "SomeJob"},
                           {"args", {{{"job_class", "SomeJob"}, {"arguments", {"t9"}}}}}},
                      "default");
        REQUIRE(plan);
        CHECK(plan->tenant == "t9");
        CHECK(plan->key == "ns:sidekiq-fair_tenant:enqueued:SomeJob:tenant:t9");
    }
    SECTION("the job's own fair_tenant_queues win; an empty list disables") {
        auto plan = fair.plan(json{{"class", "Other"},
                                   {"fair_tenant", "t"},
                                   {"fair_tenant_queues", {{{"queue", "q2"}, {"threshold", 3}}}}},
                              "default");
        REQUIRE(plan);
        REQUIRE(plan->rules.size() == 1);
        CHECK(plan->rules[0].queue == "q2");
        CHECK(plan->rules[0].threshold == 3);
        CHECK_FALSE(plan->rules[0].per);
        CHECK_FALSE(fair.plan(
            json{{"class", "SomeJob"}, {"args", {"acme"}}, {"fair_tenant_queues", json::array()}},
            "default"));
    }
    SECTION("not registered: no rules, no tenant, or already rerouted") {
        CHECK_FALSE(fair.plan(json{{"class", "OnlyQueue"}, {"fair_tenant", "t"}}, "critical"));
        CHECK_FALSE(fair.plan(json{{"class", "Unknown"}, {"fair_tenant", "t"}}, "default"));
        CHECK_FALSE(fair.plan(json{{"class", "SomeJob"}, {"args", json::array()}}, "default"));
        // Its queue differs from the class's queue: rerouted before (or pushed elsewhere).
        CHECK_FALSE(fair.plan(json{{"class", "SomeJob"}, {"args", {"acme"}}}, "throttled_2x"));
        CHECK_FALSE(fair.plan(json{{"class", "SomeJob"}, {"args", {"acme"}}}, "critical"));
        // A class without queue: — a job in one of its rules' queues was rerouted.
        CHECK(fair.plan(json{{"class", "NoQueueJob"}, {"fair_tenant", "t"}}, "default"));
        CHECK(fair.plan(json{{"class", "NoQueueJob"}, {"fair_tenant", "t"}}, "other"));
        CHECK_FALSE(fair.plan(json{{"class", "NoQueueJob"}, {"fair_tenant", "t"}}, "slow"));
    }
    SECTION("malformed fair_tenant_queues in a job are errors naming the field") {
        auto bad = [&](json rules) {
            try {
                fair.plan(json{{"class", "X"}, {"fair_tenant", "t"}, {"fair_tenant_queues", rules}},
                          "default");
                return std::string();
            } catch (const std::invalid_argument& e) {
                return std::string(e.what());
            }
        };
        CHECK_THAT(bad("x"), Catch::Contains("fair_tenant_queues must be an array"));
        CHECK_THAT(bad({{{"threshold", 1}}}), Catch::Contains("fair_tenant_queues[0].queue"));
        CHECK_THAT(bad({{{"queue", "q"}, {"threshold", "many"}}}),
                   Catch::Contains("fair_tenant_queues[0].threshold"));
        CHECK_THAT(bad({{{"queue", "q"}, {"threshold", 1}, {"per", "1 hour"}}}),
                   Catch::Contains("fair_tenant_queues[0].per"));
        // Numbers in strings are numbers (`per: 1.hour` under ActiveSupport is "3600").
        CHECK(bad({{{"queue", "q"}, {"threshold", "1"}, {"per", "3600"}}}).empty());
        CHECK_THAT(bad({{{"queue", "q"}, {"threshold", 1}, {"per", -5}}}),
                   Catch::Contains("fair_tenant_queues[0].per"));
    }
}

TEST_CASE("client: the class's YAML queue is the default queue", "[fair_tenant][client]") {
    Config c = parse_config(kYaml, "test.yml", "development");
    Client client = make_process_client(c);
    CHECK(client.normalize({{"class", "OnlyQueue"}})["queue"] == "critical");
    CHECK(client.normalize({{"class", "OnlyQueue"}, {"queue", "q"}})["queue"] == "q");
    CHECK(client.normalize({{"class", "Unknown"}})["queue"] == "default");
    CHECK(client.chain().names() == std::vector<std::string>{"fair_tenant"});
    CHECK_THROWS_AS(client.normalize({{"class", "A"}, {"args", 5}}), std::invalid_argument);
    CHECK_THROWS_AS(client.normalize({{"class", "A"}, {"at", "tomorrow"}}), std::invalid_argument);
}

TEST_CASE("enqueue: --at TIME", "[fair_tenant][client]") {
    using admin::parse_enqueue_time;
    CHECK(parse_enqueue_time("1795312741.5", 0) == Approx(1795312741.5));
    CHECK(parse_enqueue_time("+30", 1000) == Approx(1030));
    CHECK(parse_enqueue_time("+5m", 1000) == Approx(1300));
    CHECK(parse_enqueue_time("+2h", 0) == Approx(7200));
    CHECK(parse_enqueue_time("+1d", 0) == Approx(86400));
    CHECK(parse_enqueue_time("2026-11-22T15:00:00Z", 0) == Approx(1795359600));
    CHECK(parse_enqueue_time("2026-11-22 15:00:00", 0) == Approx(1795359600));
    CHECK(parse_enqueue_time("2026-11-22T16:00:00.25+01:00", 0) == Approx(1795359600.25));
    CHECK(parse_enqueue_time("2026-11-22T10:00:00-05:00", 0) == Approx(1795359600));
    CHECK_FALSE(parse_enqueue_time("tomorrow", 0));
    CHECK_FALSE(parse_enqueue_time("", 0));
    CHECK_FALSE(parse_enqueue_time("+", 0));
    CHECK_FALSE(parse_enqueue_time("+5y", 0));
    CHECK_FALSE(parse_enqueue_time("2026-13-22T15:00:00Z", 0));
    CHECK_FALSE(parse_enqueue_time("2026-11-22T15:00:00 UTC", 0));
    CHECK_FALSE(parse_enqueue_time("-5", 0));
}
