// `fair_fetch:`: the YAML shapes (arg or key per queue, section-wide and per-queue weights and
// max_tenants) and strict errors naming the key and line (exit 78 in the daemon).
#include <catch2/catch.hpp>

#include "kiqd/config.hpp"
#include "support/config_errors.hpp"

using namespace kiqd;

using kiqd::test::config_error_of;
using kiqd::test::default_queue_error_of;
using kiqd::test::load_default_queue;

TEST_CASE("fair_fetch: queues by arg or key, weights and max_tenants", "[config][fair_fetch]") {
    auto c = parse_config(R"(
queues: [default, imports]
fair_fetch:
  default: {arg: 0}
  imports: {key: tenant_id, weights: {acme: 5}, max_tenants: 50}
  weights: {acme: 3, big: 2}
  max_tenants: 500
)",
                          "test.yml", "production");
    validate_config(c);
    REQUIRE(c.fair_fetch.queues.size() == 2);
    const auto* d = c.fair_fetch.find("default");
    REQUIRE(d);
    CHECK(d->arg == 0);
    CHECK(d->key.empty());
    CHECK(d->weights == std::map<std::string, int>{{"acme", 3}, {"big", 2}});
    CHECK(d->max_tenants == 500);
    CHECK(d->line == 4);
    const auto* i = c.fair_fetch.find("imports");
    REQUIRE(i);
    CHECK(!i->arg);
    CHECK(i->key == "tenant_id");
    // The queue's own weight wins; the section's others still apply.
    CHECK(i->weights == std::map<std::string, int>{{"acme", 5}, {"big", 2}});
    CHECK(i->max_tenants == 50);
    CHECK(!c.fair_fetch.find("low"));
    CHECK(load_default_queue("").fair_fetch.queues.empty());
}

TEST_CASE("fair_fetch: bad entries name their key and line", "[config][fair_fetch]") {
    CHECK(default_queue_error_of("fair_fetch: [default]\n") ==
          "fair_fetch (line 2): must be a map of queue: {arg: N} or {key: NAME}");
    CHECK(default_queue_error_of("fair_fetch:\n  default: {}\n") ==
          "fair_fetch.default (line 3): needs arg: N (the tenant is args[N]) or key: NAME");
    CHECK(default_queue_error_of("fair_fetch:\n  default: {arg: 0, key: t}\n") ==
          "fair_fetch.default (line 3): takes arg or key, not both");
    CHECK(default_queue_error_of("fair_fetch:\n  default: {arg: -1}\n") ==
          "fair_fetch.default.arg (line 3): must be between 0 and 1000");
    CHECK(default_queue_error_of("fair_fetch:\n  default: {arg: x}\n") ==
          "fair_fetch.default.arg (line 3): must be an integer");
    CHECK(default_queue_error_of("fair_fetch:\n  default: {key: ''}\n") ==
          "fair_fetch.default.key (line 3): is empty");
    CHECK(default_queue_error_of("fair_fetch:\n  default: {arg: 0, by: x}\n") ==
          "fair_fetch.default.by (line 3): unknown key");
    CHECK(default_queue_error_of("fair_fetch:\n  default: {arg: 0}\n  weights: {acme: 0}\n") ==
          "fair_fetch.weights.acme (line 4): must be between 1 and 1000");
    CHECK(default_queue_error_of("fair_fetch:\n  default: {arg: 0}\n  max_tenants: 0\n") ==
          "fair_fetch.max_tenants (line 4): must be between 1 and 1000000");
    CHECK(default_queue_error_of("fair_fetch:\n  default: {arg: 0, max_tenants: 2000000}\n") ==
          "fair_fetch.default.max_tenants (line 3): must be between 1 and 1000000");
    CHECK(default_queue_error_of("fair_fetch:\n  low: {arg: 0}\n") ==
          "fair_fetch.low (line 3): queue 'low' is not one of the queues: this process would "
          "never fetch it");
    CHECK(default_queue_error_of("fair_fetch:\n  \"bad name\": {arg: 0}\n")
              .find("fair_fetch.bad name (line 3)") == 0);
    CHECK(config_error_of("fair_fetch: {default: {arg: 0}}\n").empty());  // validated later
}
