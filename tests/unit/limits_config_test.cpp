// Per-class throttle and concurrency_limit: YAML shapes, defaults and strict errors (each
// naming its key and line), the fixed-window arithmetic, and which scope a job counts in.
#include <catch2/catch.hpp>

#include "kiqd/config.hpp"
#include "middleware/limits/concurrency_limit.hpp"
#include "middleware/limits/limit_scope.hpp"
#include "middleware/limits/throttle.hpp"
#include "support/config_errors.hpp"
#include "support/job_of.hpp"

using namespace kiqd;

using kiqd::test::config_error_of;
using kiqd::test::job_of;

TEST_CASE("limits: throttle and concurrency_limit per class in handlers:", "[config][limits]") {
    auto c = parse_config(R"(
handlers:
  Report:
    throttle: {limit: 10, period: 2}
  Sync:
    throttle: {limit: 5, period: 60, by: tenant}
    concurrency_limit: 3
  Export:
    throttle: {limit: 1, period: 1, by: "arg:2"}
    concurrency_limit: {limit: 2, by: tenant}
  Mail:
    lock: while_executing
concurrency_limits: {slot_ttl: 10, check_interval: 0.5}
)",
                          "test.yml", "production");
    REQUIRE(c.classes.size() == 4);
    const auto& report = c.classes.at("Report");
    REQUIRE(report.throttle);
    CHECK(report.throttle->limit == 10);
    CHECK(report.throttle->period == 2);
    CHECK(report.throttle->by == LimitScope::job_class);
    CHECK_FALSE(report.concurrency_limit);
    const auto& sync = c.classes.at("Sync");
    CHECK(sync.throttle->by == LimitScope::tenant);
    REQUIRE(sync.concurrency_limit);
    CHECK(sync.concurrency_limit->limit == 3);
    CHECK(sync.concurrency_limit->by == LimitScope::job_class);
    const auto& exp = c.classes.at("Export");
    CHECK(exp.throttle->by == LimitScope::arg);
    CHECK(exp.throttle->arg == 2);
    CHECK(exp.concurrency_limit->limit == 2);
    CHECK(exp.concurrency_limit->by == LimitScope::tenant);
    CHECK_FALSE(c.classes.at("Mail").throttle);
    CHECK(c.concurrency_limits.slot_ttl == std::chrono::seconds(10));
    CHECK(c.concurrency_limits.check_interval == std::chrono::milliseconds(500));

    CHECK(ThrottleMiddleware::configured(c));
    CHECK(ConcurrencyLimitMiddleware::configured(c));
    auto plain = parse_config("handlers:\n  Mail:\n    lock: while_executing\n", "t", "");
    CHECK_FALSE(ThrottleMiddleware::configured(plain));
    CHECK_FALSE(ConcurrencyLimitMiddleware::configured(plain));
    CHECK(plain.concurrency_limits.slot_ttl == std::chrono::seconds(30));
    CHECK(plain.concurrency_limits.check_interval == std::chrono::seconds(5));
}

TEST_CASE("limits: bad throttle/concurrency_limit values name the key and the line",
          "[config][limits]") {
    CHECK(config_error_of("handlers:\n  A:\n    throttle: 10\n") ==
          "handlers.A.throttle (line 3): must be a map {limit: L, period: SECONDS, by: ...}");
    CHECK(config_error_of("handlers:\n  A:\n    throttle: {period: 2}\n") ==
          "handlers.A.throttle.limit (line 3): is required");
    CHECK(config_error_of("handlers:\n  A:\n    throttle: {limit: 2}\n") ==
          "handlers.A.throttle.period (line 3): is required");
    CHECK(config_error_of("handlers:\n  A:\n    throttle: {limit: 0, period: 2}\n") ==
          "handlers.A.throttle.limit (line 3): must be at least 1");
    CHECK(config_error_of("handlers:\n  A:\n    throttle: {limit: many, period: 2}\n") ==
          "handlers.A.throttle.limit (line 3): must be an integer");
    CHECK(config_error_of("handlers:\n  A:\n    throttle: {limit: 1, period: 1.5}\n") ==
          "handlers.A.throttle.period (line 3): must be an integer");
    CHECK(config_error_of("handlers:\n  A:\n    throttle: {limit: 1, period: 0}\n") ==
          "handlers.A.throttle.period (line 3): must be a whole number of seconds from 1 to "
          "31622400");
    CHECK(config_error_of("handlers:\n  A:\n    throttle:\n      limit: 1\n      period: 1\n"
                          "      by: queue\n") ==
          "handlers.A.throttle.by (line 6): must be class, tenant or arg:N, not 'queue'");
    CHECK(config_error_of("handlers:\n  A:\n    throttle: {limit: 1, period: 1, by: 'arg:x'}\n") ==
          "handlers.A.throttle.by (line 3): arg:N needs an argument index N (0, 1, ...), not "
          "'arg:x'");
    CHECK(config_error_of("handlers:\n  A:\n    throttle: {limit: 1, period: 1, by: 'arg:'}\n") ==
          "handlers.A.throttle.by (line 3): arg:N needs an argument index N (0, 1, ...), not "
          "'arg:'");
    CHECK(config_error_of("handlers:\n  A:\n    throttle: {limit: 1, period: 1, per: 5}\n") ==
          "handlers.A.throttle.per (line 3): unknown key");

    CHECK(config_error_of("handlers:\n  A:\n    concurrency_limit: 0\n") ==
          "handlers.A.concurrency_limit (line 3): must be from 1 to 1000000");
    CHECK(config_error_of("handlers:\n  A:\n    concurrency_limit: three\n") ==
          "handlers.A.concurrency_limit (line 3): must be an integer");
    CHECK(config_error_of("handlers:\n  A:\n    concurrency_limit: [3]\n") ==
          "handlers.A.concurrency_limit (line 3): must be a number or a map {limit: N, by: class "
          "| tenant}");
    CHECK(config_error_of("handlers:\n  A:\n    concurrency_limit: {by: tenant}\n") ==
          "handlers.A.concurrency_limit.limit (line 3): is required");
    CHECK(config_error_of("handlers:\n  A:\n    concurrency_limit: {limit: 2, by: 'arg:0'}\n") ==
          "handlers.A.concurrency_limit.by (line 3): must be class or tenant, not 'arg:0'");
    CHECK(config_error_of("handlers:\n  A:\n    concurrency_limit: {limit: 2, max: 3}\n") ==
          "handlers.A.concurrency_limit.max (line 3): unknown key");

    CHECK(config_error_of("concurrency_limits: {slot_ttl: 1}\n") ==
          "concurrency_limits.slot_ttl (line 1): must be at least 3 seconds");
    CHECK(config_error_of("concurrency_limits: {check_interval: 0}\n") ==
          "concurrency_limits.check_interval (line 1): must be greater than 0");
    CHECK(config_error_of("concurrency_limits: {ttl: 5}\n") ==
          "concurrency_limits.ttl (line 1): unknown key");
    CHECK(config_error_of("concurrency_limits: 5\n") ==
          "concurrency_limits (line 1): must be a map");
}

TEST_CASE("limits: fixed windows are aligned to multiples of the period since the epoch",
          "[limits]") {
    // Rack::Attack: key = floor(now / period), expiry = period − now mod period + 1.
    auto w = throttle_window(1000, 60);
    CHECK(w.number == 16);
    CHECK(w.ttl == 21);  // 960..1019: 20 s left, +1
    CHECK(w.next_start == 1020);
    w = throttle_window(1020, 60);
    CHECK(w.number == 17);
    CHECK(w.ttl == 61);
    CHECK(w.next_start == 1080);
    w = throttle_window(1795312749, 2);
    CHECK(w.number == 897656374);
    CHECK(w.ttl == 2);
    CHECK(w.next_start == 1795312750);
}

TEST_CASE("limits: the scope a job counts in, with and without a tenant", "[limits]") {
    auto j = job_of(R"({"class":"Sync","args":["a",7,{"x":1}],"jid":"1","fair_tenant":"acme"})");
    CHECK(limit_scope(j, LimitScope::job_class) == "Sync");
    CHECK(limit_scope(j, LimitScope::tenant) == "Sync:tenant:acme");
    CHECK(limit_scope(j, LimitScope::arg, 0) == "Sync:arg:0:a");
    // Without a payload tenant, the class's `fair_tenant: {arg: N}` names it.
    auto bare = job_of(R"({"class":"Sync","args":["globex",7],"jid":"x"})");
    CHECK(limit_scope(bare, LimitScope::tenant) == "Sync");
    CHECK(limit_scope(bare, LimitScope::tenant, -1, 0) == "Sync:tenant:globex");
    CHECK(limit_scope(bare, LimitScope::tenant, -1, 1) == "Sync:tenant:7");
    CHECK(limit_scope(bare, LimitScope::tenant, -1, 5) == "Sync");           // no such argument
    CHECK(limit_scope(j, LimitScope::tenant, -1, 0) == "Sync:tenant:acme");  // payload wins
    CHECK(limit_scope(j, LimitScope::arg, 1) == "Sync:arg:1:7");
    CHECK(limit_scope(j, LimitScope::arg, 2) == R"(Sync:arg:2:{"x":1})");
    // No such argument, no tenant: the class's own scope (the limit still bounds them).
    CHECK(limit_scope(j, LimitScope::arg, 3) == "Sync");
    auto none = job_of(R"({"class":"Sync","args":[],"jid":"2"})");
    CHECK_FALSE(job_tenant(none));
    CHECK(limit_scope(none, LimitScope::tenant) == "Sync");
    CHECK_FALSE(job_tenant(job_of(R"({"class":"Sync","args":[],"fair_tenant":""})")));
    CHECK_FALSE(job_tenant(job_of(R"({"class":"Sync","args":[],"fair_tenant":null})")));
    CHECK(*job_tenant(job_of(R"({"class":"Sync","args":[],"fair_tenant":42})")) == "42");
    // ActiveJob: the wrapped class is the one configured.
    auto aj = job_of(R"({"class":"ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper",
        "wrapped":"Sync","args":[{}],"fair_tenant":"t1"})");
    CHECK(limit_scope(aj, LimitScope::tenant) == "Sync:tenant:t1");
}
