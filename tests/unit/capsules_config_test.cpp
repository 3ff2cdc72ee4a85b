// Sidekiq 7's `capsules:` as kiqd reads them (config/capsules_config.hpp): the shape Sidekiq
// 7.3's CLI accepts in sidekiq.yml, and exit-78 errors naming the key.
#include <catch2/catch.hpp>

#include "kiqd/config.hpp"
#include "server/connection_budget.hpp"
#include "support/config_errors.hpp"

using kiqd::Config;
using kiqd::test::load_validated;
using kiqd::test::validation_error_of;

namespace {

// The top-level queues and concurrency, then `capsules` as given.
std::string with_capsules(const std::string& capsules) {
    return ":concurrency: 5\n:queues: [default, [critical, 2]]\n:capsules:\n" + capsules;
}

}  // namespace

TEST_CASE("capsules: a Sidekiq 7 sidekiq.yml's capsules, in file order", "[config][capsules]") {
    const auto c = load_validated(
        with_capsules("  :single:\n    :concurrency: 1\n    :queues: [single]\n"
                      "  reports:\n    concurrency: 3\n    queues: [[reports, 3], 'bulk,1']\n"
                      "production:\n  :capsules:\n    :single:\n      :concurrency: 1\n"
                      "      :queues: [single]\n    reports:\n      concurrency: 4\n"
                      "      queues: [[reports, 3], 'bulk,1']\n"));
    CHECK(c.concurrency == 5);
    REQUIRE(c.capsules.size() == 2);
    CHECK(c.capsules[0].name == "single");
    CHECK(c.capsules[0].concurrency == 1);
    REQUIRE(c.capsules[0].queues.size() == 1);
    CHECK(c.capsules[0].queues[0].name == "single");
    CHECK(c.capsules[0].queues[0].weight == 0);
    CHECK(c.capsules[1].name == "reports");
    CHECK(c.capsules[1].concurrency == 4);  // the environment's sub-hash wins, as in Sidekiq
    REQUIRE(c.capsules[1].queues.size() == 2);
    CHECK(c.capsules[1].queues[0].weight == 3);
    // "name,weight" strings are pairs, as Sidekiq's Capsule#queues= splits them.
    CHECK(c.capsules[1].queues[1].name == "bulk");
    CHECK(c.capsules[1].queues[1].weight == 1);
    CHECK(kiqd::total_concurrency(c) == 10);
    CHECK(c.load_warnings.empty());
}

TEST_CASE("capsules: the connection budget counts every capsule's threads", "[config][capsules]") {
    const auto c =
        load_validated(with_capsules("  single:\n    concurrency: 1\n    queues: [single]\n"
                                     "  reports:\n    concurrency: 3\n    queues: [reports]\n"));
    const auto count = kiqd::redis_connection_count(c);
    const auto without =
        kiqd::redis_connection_count(load_validated(":concurrency: 5\n:queues: [default]\n"));
    CHECK(count.total == without.total + 4);
    CHECK_THAT(count.parts, Catch::StartsWith("9 processors (default 5, single 1, reports 3)"));
}

TEST_CASE("capsules: bad capsule config names the key", "[config][capsules]") {
    CHECK(validation_error_of(with_capsules("  reports:\n    concurrency: 0\n    queues: [r]\n")) ==
          "capsules.reports.concurrency (line 5): must be between 1 and 1000");
    CHECK(validation_error_of(
              with_capsules("  reports:\n    concurrency: many\n    queues: [r]\n")) ==
          "capsules.reports.concurrency (line 5): must be an integer");
    CHECK(validation_error_of(with_capsules("  reports:\n    queues: [r]\n")) ==
          "capsules.reports.concurrency (line 4): is required (this capsule's threads)");
    CHECK(validation_error_of(with_capsules("  reports:\n    concurrency: 2\n")) ==
          "capsules.reports.queues (line 4): is required (this capsule's queues)");
    CHECK(validation_error_of(with_capsules("  reports:\n    concurrency: 2\n    queues: []\n")) ==
          "capsules.reports.queues (line 6): is empty: list at least one queue");
    CHECK(validation_error_of(
              with_capsules("  reports:\n    concurrency: 2\n    queues: [[r, 0]]\n")) ==
          "capsules.reports.queues[0] (line 6): weight must be at least 1");
    CHECK(validation_error_of(with_capsules("  reports:\n    concurrency: 2\n    queues: [r]\n"
                                            "    threads: 4\n")) ==
          "capsules.reports.threads (line 7): unknown key");
    CHECK(validation_error_of(
              with_capsules("  reports:\n    concurrency: 2\n    queues: ['bad queue']\n")) ==
          "capsules.reports.queues (line 4): invalid queue name 'bad queue' (letters, digits, "
          "_ : . - only)");
    CHECK(validation_error_of(with_capsules("  reports: 3\n"))
              .rfind("capsules.reports (line 4): ", 0) == 0);
    CHECK(validation_error_of(":queues: [a]\n:capsules: [x]\n").rfind("capsules (line 2): ", 0) ==
          0);
    CHECK(validation_error_of(with_capsules("  default:\n    concurrency: 2\n    queues: [r]\n")) ==
          "capsules.default (line 4): is the top-level queues and concurrency; give this "
          "capsule another name");
}

TEST_CASE("capsules: a queue belongs to one capsule; one fetch mode serves them all",
          "[config][capsules]") {
    CHECK(validation_error_of(
              with_capsules("  reports:\n    concurrency: 2\n    queues: [r, critical]\n")) ==
          "capsules.reports.queues (line 4): queue 'critical' is already served by capsule "
          "'default' (a queue belongs to one capsule)");
    CHECK(validation_error_of(with_capsules("  a:\n    concurrency: 2\n    queues: [r]\n"
                                            "  b:\n    concurrency: 2\n    queues: [r]\n")) ==
          "capsules.b.queues (line 7): queue 'r' is already served by capsule 'a' (a queue "
          "belongs to one capsule)");
    CHECK(validation_error_of(with_capsules("  a:\n    concurrency: 2\n    queues: [r, r]\n")) ==
          "capsules.a.queues (line 4): queue 'r' is listed twice");
    CHECK_THAT(validation_error_of("fetch: reliable\n" +
                                   with_capsules("  a:\n    concurrency: 2\n    queues: [r]\n")),
               Catch::StartsWith("capsules (line 5): need fetch: basic"));
    CHECK_THAT(validation_error_of("selector: urgency=high\n" +
                                   with_capsules("  a:\n    concurrency: 2\n    queues: [r]\n")),
               Catch::StartsWith("capsules (line 5): cannot be combined with a selector"));
    CHECK_THAT(validation_error_of("fair_fetch:\n  r: {arg: 0}\n" +
                                   with_capsules("  a:\n    concurrency: 2\n    queues: [r]\n")),
               Catch::StartsWith("capsules.a.queues (line 6): queue 'r' is a fair_fetch queue"));
}
