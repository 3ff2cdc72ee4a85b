#include "kiqd/config.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <utility>
#include <vector>

#include "fetch/queue_order.hpp"
#include "support/config_errors.hpp"

using kiqd::ConfigError;
using kiqd::parse_config;
using kiqd::test::validation_error_of;

TEST_CASE("a real sidekiq.yml loads unchanged", "[config]") {
    // The shape of config/sidekiq.yml in Sidekiq's own docs: symbol keys, weighted pairs,
    // an environment sub-hash.
    const char* yaml = R"(
---
:concurrency: 5
:timeout: 8
:verbose: false
:tag: billing
:labels:
  - canary
:queues:
  - [critical, 6]
  - [default, 3]
  - [low, 1]
production:
  :concurrency: 20
staging:
  :concurrency: 10
)";
    auto c = parse_config(yaml, "sidekiq.yml", "production");
    CHECK(c.concurrency == 20);
    CHECK(c.timeout == std::chrono::seconds(8));
    CHECK(c.tag == "billing");
    CHECK(c.labels == std::vector<std::string>{"canary"});
    REQUIRE(c.queues.size() == 3);
    CHECK(c.queues[0].name == "critical");
    CHECK(c.queues[0].weight == 6);
    CHECK(c.queues[2].weight == 1);
    auto staging = parse_config(yaml, "sidekiq.yml", "staging");
    CHECK(staging.concurrency == 10);
}

TEST_CASE("plain queue names without colons give strict order", "[config]") {
    auto c = parse_config("queues: [critical, default]\nconcurrency: 3\n", "x", "development");
    REQUIRE(c.queues.size() == 2);
    CHECK(c.queues[0].weight == 0);
    CHECK(kiqd::QueueOrder(c.queues).strict());
}

TEST_CASE("kiqd's own keys", "[config]") {
    auto c = parse_config(R"(
redis:
  url: redis://127.0.0.1:7000/2
  key_prefix: myapp
logging: {level: warn, format: json}
compat: 7
max_payload_bytes: 4096
queues: [default]
server_middleware: [timing, {throttle: {limit: 3}}]
)",
                          "x", "development");
    CHECK(c.redis.url == "redis://127.0.0.1:7000/2");
    CHECK(c.redis.key_prefix == "myapp");
    CHECK(c.logging.format == "json");
    CHECK(c.compat == kiqd::Compat::v7);
    CHECK_FALSE(c.compat_auto);  // an explicit compat wins over the cluster
    CHECK(c.max_payload_bytes == 4096);
    REQUIRE(c.server_middleware.size() == 2);
    CHECK(c.server_middleware[1].name == "throttle");
    CHECK(c.server_middleware[1].options["limit"].as<int>() == 3);
}

TEST_CASE("bad configs name the key and the line", "[config]") {
    // {config text, what its error must say}
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"queues: [default]\nconcurency: 5\n", "concurency (line 2): unknown key"},
        {"queues: [default]\nconcurrency: lots\n", "concurrency (line 2): must be an integer"},
        {"queues:\n  - [critical, 0]\n", "queues[0] (line 2): weight must be at least 1"},
        {"queues: []\n", "queues (line 1): is empty"},
        {"concurrency: 5\n", "queues: no queues configured"},
        {"queues: [default, default]\n", "listed twice"},
        {"queues: ['bad name']\n", "invalid queue name"},
        {"queues: [a]\nredis: {url: http://x}\n", "redis.url"},
        {"queues: [a]\nlogging: {format: xml}\n", "logging.format"},
        {"queues: [a]\nredis: {bogus: 1}\n", "redis.bogus (line 2): unknown key"},
        {"queues: [a\n", "(yaml)"},
        {"- just\n- a list\n", "must be a map"},
        {"queues: [a]\ncompat: 5\n", "compat (line 2)"},
        {"queues: [a]\ncompat: automatic\n", "compat (line 2): must be auto, 6, 7 or 8"},
        {"queues: [a]\ncompat: [7]\n", "compat (line 2)"},
    };
    for (const auto& [yaml, expected] : cases) {
        INFO(yaml);
        CHECK_THAT(validation_error_of(yaml), Catch::Contains(expected));
    }
    CHECK(validation_error_of("queues: [a]\n") == "");
}

TEST_CASE("ERB: the ENV forms sidekiq.yml files use", "[config]") {
    setenv("KIQD_TEST_CONC", "7", 1);
    unsetenv("KIQD_TEST_MISSING");
    auto c = parse_config(
        "concurrency: <%= ENV['KIQD_TEST_CONC'] %>\n"
        "timeout: <%= ENV.fetch('KIQD_TEST_MISSING', 9) %>\n"
        "tag: <%= ENV[\"KIQD_TEST_MISSING\"] || 'fallback' %>\n"
        "queues: [a]\n",
        "x", "development");
    CHECK(c.concurrency == 7);
    CHECK(c.timeout == std::chrono::seconds(9));
    CHECK(c.tag == "fallback");
    CHECK_THAT(validation_error_of("queues: [a]\ntag: <%= `rm -rf /` %>\n"),
               Catch::Contains("unsupported ERB expression"));
    CHECK_THAT(validation_error_of("queues: [a]\n<% require 'x' %>\n"), Catch::Contains("line 2"));
}

TEST_CASE("ERB: the conversions and defaults real sidekiq.yml files use", "[config]") {
    setenv("KIQD_TEST_CONC", "7", 1);
    setenv("KIQD_TEST_WORDS", "12 threads", 1);
    setenv("KIQD_TEST_SECRET", "hunter2", 1);
    unsetenv("KIQD_TEST_MISSING");
    auto c = parse_config(
        "concurrency: <%= ENV.fetch(\"KIQD_TEST_MISSING\") { 5 } %>\n"
        "max_retries: <%= ENV.fetch(\"KIQD_TEST_MISSING\", 4).to_i %>\n"
        "dead_max_jobs: <%= Integer(ENV[\"KIQD_TEST_MISSING\"] || 300) %>\n"
        "timeout: <%= ENV[\"KIQD_TEST_CONC\"].to_i %>\n"
        "tag: \"<%= ENV['KIQD_TEST_WORDS'].to_i %>-<%= ENV['KIQD_TEST_MISSING'].to_i %>\"\n"
        "queues: [a]\n",
        "x", "development");
    CHECK(c.concurrency == 5);
    CHECK(c.max_retries == 4);
    CHECK(c.dead_max_jobs == 300);
    CHECK(c.timeout == std::chrono::seconds(7));
    CHECK(c.tag == "12-0");  // Ruby's to_i: the leading integer, and nil.to_i is 0
    CHECK(parse_config("concurrency: <%= Integer(ENV.fetch('KIQD_TEST_CONC', 1)) %>\nqueues: [a]\n",
                       "x", "development")
              .concurrency == 7);
    CHECK(parse_config("concurrency: <%= (ENV['KIQD_TEST_MISSING'] || 3).to_i %>\nqueues: [a]\n",
                       "x", "development")
              .concurrency == 3);
    // Integer() refuses what is not an integer, without showing the value (it may be a secret).
    const std::string bad =
        validation_error_of("queues: [a]\nconcurrency: <%= Integer(ENV['KIQD_TEST_SECRET']) %>\n");
    CHECK_THAT(bad, Catch::Contains("line 2") && Catch::Contains("not an integer"));
    CHECK_THAT(bad, !Catch::Contains("hunter2"));
    CHECK_THAT(
        validation_error_of("queues: [a]\nconcurrency: <%= Integer(ENV['KIQD_TEST_MISSING']) %>\n"),
        Catch::Contains("nil"));
    CHECK_THAT(
        validation_error_of("queues: [a]\nconcurrency: <%= ENV.fetch('KIQD_TEST_MISSING') %>\n"),
        Catch::Contains("KIQD_TEST_MISSING") && Catch::Contains("not set"));
    CHECK_THAT(validation_error_of("queues: [a]\nconcurrency: <%= ENV['X'].to_sym %>\n"),
               Catch::Contains("unsupported ERB expression"));
}

TEST_CASE("sidekiq.yml: other tools' sections load with one warning each", "[config]") {
    auto c = parse_config(
        ":concurrency: 5\n"
        ":queues: [default]\n"
        ":lifecycle_events:\n  :startup: []\n"
        ":scheduler:\n  :enabled: true\n"
        ":schedule:\n  hourly:\n    cron: '0 * * * *'\n    class: HourlyJob\n"
        ":capsules:\n"
        "  :unsafe:\n    :concurrency: 1\n    :queues: [single, [other, 2]]\n",
        "sidekiq.yml", "production");
    CHECK(c.concurrency == 5);
    CHECK(c.cron.size() == 1);      // :schedule: is honoured (cron.md), not warned about
    CHECK(c.capsules.size() == 1);  // :capsules: are run (capsules_config_test.cpp)
    REQUIRE(c.load_warnings.size() == 1);
    CHECK_THAT(c.load_warnings[0], Catch::StartsWith("lifecycle_events (line 4): ignored"));
    CHECK(parse_config("queues: [a]\n", "x", "production").load_warnings.empty());
}

TEST_CASE("-q NAME,WEIGHT", "[config]") {
    auto q = kiqd::parse_queue_arg("critical,3");
    CHECK(q.name == "critical");
    CHECK(q.weight == 3);
    CHECK(kiqd::parse_queue_arg("default").weight == 0);
    CHECK_THROWS_AS(kiqd::parse_queue_arg("x,0"), ConfigError);
    CHECK_THROWS_AS(kiqd::parse_queue_arg("x,abc"), ConfigError);
}

TEST_CASE("fetch: basic by default, reliable with its options", "[config]") {
    auto basic = parse_config("queues: [a]\n", "t.yml", "production");
    CHECK(basic.fetch == kiqd::FetchMode::basic);
    CHECK(basic.reliable_fetch.orphan_check_interval == std::chrono::seconds(60));
    CHECK(basic.reliable_fetch.liveness_ttl == std::chrono::seconds(60));
    CHECK(basic.reliable_fetch.max_interruptions == 3);
    auto c = parse_config(
        "queues: [a]\nfetch: reliable\nreliable_fetch:\n  orphan_check_interval: 5\n"
        "  liveness_ttl: 15\n  max_interruptions: 5\n",
        "t.yml", "production");
    CHECK(c.fetch == kiqd::FetchMode::reliable);
    CHECK(c.reliable_fetch.orphan_check_interval == std::chrono::seconds(5));
    CHECK(c.reliable_fetch.liveness_ttl == std::chrono::seconds(15));
    CHECK(c.reliable_fetch.max_interruptions == 5);

    CHECK(validation_error_of("queues: [a]\nfetch: super\n") ==
          "fetch (line 2): must be basic or reliable, not 'super'");
    CHECK(validation_error_of("queues: [a]\nreliable_fetch: {liveness_ttl: 1}\n") ==
          "reliable_fetch.liveness_ttl (line 2): must be at least 3 seconds");
    CHECK(validation_error_of("queues: [a]\nreliable_fetch: {max_interruptions: 0}\n") ==
          "reliable_fetch.max_interruptions (line 2): must be at least 1");
    CHECK(validation_error_of("queues: [a]\nreliable_fetch: {orphan_check_interval: -1}\n") ==
          "reliable_fetch.orphan_check_interval (line 2): must be greater than 0");
    CHECK(validation_error_of("queues: [a]\nreliable_fetch: {orphan_interval: 1}\n") ==
          "reliable_fetch.orphan_interval (line 2): unknown key");
}

TEST_CASE("batched fetch: reliable_fetch.batch_size and prefetch", "[config][batch]") {
    auto d = parse_config("queues: [a]\n", "t.yml", "production");
    CHECK(d.reliable_fetch.batch_size == 50);
    CHECK(d.prefetch == 1);  // opt-in: Sidekiq's one BRPOP per job
    auto c = parse_config("queues: [a]\nfetch: reliable\nreliable_fetch: {batch_size: 1}\n",
                          "t.yml", "production");
    CHECK(c.reliable_fetch.batch_size == 1);
    CHECK(parse_config("queues: [a]\nprefetch: 20\n", "t.yml", "production").prefetch == 20);
    CHECK(validation_error_of("queues: [a]\nreliable_fetch: {batch_size: 0}\n") ==
          "reliable_fetch.batch_size (line 2): must be between 1 and 1000");
    CHECK(validation_error_of("queues: [a]\nreliable_fetch: {batch_size: 1001}\n") ==
          "reliable_fetch.batch_size (line 2): must be between 1 and 1000");
    CHECK_THAT(validation_error_of("queues: [a]\nreliable_fetch: {batch_size: many}\n"),
               Catch::StartsWith("reliable_fetch.batch_size (line 2): "));
    CHECK(validation_error_of("queues: [a]\nprefetch: 0\n") ==
          "prefetch (line 2): must be between 1 and 1000");
    CHECK(validation_error_of("queues: [a]\nfetch: reliable\nprefetch: 10\n") ==
          "prefetch: applies to fetch: basic only; reliable fetch batches with "
          "reliable_fetch.batch_size");
}

TEST_CASE("compat: auto is the default and may be written out", "[config][compat]") {
    auto dflt = parse_config("queues: [a]\n", "x", "development");
    CHECK(dflt.compat_auto);
    CHECK(dflt.compat == kiqd::Compat::v6);  // auto's payload format: float seconds
    auto written = parse_config("queues: [a]\ncompat: auto\n", "x", "development");
    CHECK(written.compat_auto);
    auto six = parse_config("queues: [a]\ncompat: 6\n", "x", "development");
    CHECK_FALSE(six.compat_auto);
    CHECK(six.compat == kiqd::Compat::v6);
    auto eight = parse_config("queues: [a]\ncompat: 8\n", "x", "development");
    CHECK_FALSE(eight.compat_auto);
    CHECK(eight.compat == kiqd::Compat::v8);
}
