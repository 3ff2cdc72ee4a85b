// sidekiq-limit_fetch's sidekiq.yml keys as kiqd reads them (config/limit_fetch_config.hpp):
// `limits:`, `process_limits:` and `blocking:` turn limit fetch on; bad values and
// combinations kiqd cannot fetch with exit 78 naming the key.
#include <catch2/catch.hpp>

#include "kiqd/config.hpp"
#include "server/connection_budget.hpp"
#include "support/config_errors.hpp"

using kiqd::Config;
using kiqd::test::load_validated;
using kiqd::test::validation_error_of;

TEST_CASE("limit fetch: the gem's keys, as a sidekiq.yml gives them", "[config][limit_fetch]") {
    const Config c = load_validated(
        ":queues: [default, imports, critical, a, b]\n"
        ":limits:\n  imports: 2\n  :critical: 1\n"
        ":process_limits:\n  default: 5\n"
        ":blocking:\n  - critical\n  - [a, b]\n");
    CHECK(c.limit_fetch.enabled);
    CHECK(c.limit_fetch.limits ==
          std::map<std::string, long long>{{"critical", 1}, {"imports", 2}});
    CHECK(c.limit_fetch.process_limits == std::map<std::string, long long>{{"default", 5}});
    CHECK(c.limit_fetch.blocking ==
          std::vector<std::vector<std::string>>{{"critical"}, {"a", "b"}});
    CHECK(c.limit_fetch.line == 3);
    // The heartbeat's connection is counted.
    CHECK(kiqd::redis_connection_count(c).parts.find("limit fetch heartbeat") != std::string::npos);
    CHECK_FALSE(load_validated(":queues: [default]\n").limit_fetch.enabled);
}

TEST_CASE("limit fetch: bad values and combinations name the key", "[config][limit_fetch]") {
    CHECK(validation_error_of(":queues: [a]\n:limits:\n  a: -1\n") ==
          "limits.a (line 3): must be between 0 and 1000000");
    CHECK(validation_error_of(":queues: [a]\n:limits: [a]\n").rfind("limits (line 2): ", 0) == 0);
    CHECK(validation_error_of(":queues: [a]\n:blocking:\n  - []\n") ==
          "blocking[0] (line 3): is an empty group");
    CHECK(validation_error_of(":queues: [a]\n:limits:\n  a: 1\n:fetch: reliable\n") ==
          "limits (line 3): sidekiq-limit_fetch's limits need fetch: basic (the gem's fetch is "
          "Sidekiq's basic fetch with limits)");
    CHECK(validation_error_of(":queues: [a]\n:limits:\n  a: 1\n:prefetch: 10\n") ==
          "limits (line 3): cannot be combined with prefetch: a limit counts jobs one by one");
    CHECK(validation_error_of(
              ":queues: [a]\n:process_limits:\n  a: 1\n:capsules:\n  r:\n    concurrency: 1\n"
              "    queues: [r]\n") == "limits (line 3): cannot be combined with capsules");
}
