// The schedule sections of the config (cron_config.hpp) and sidekiq-cron's value formats
// (cron_store.hpp): kiqd's `cron:` list and map, sidekiq-scheduler's `:scheduler: :schedule:`, a
// top-level `:schedule:`, and exit 78 naming the key and line of a bad entry.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "cron/cron_store.hpp"
#include "support/config_errors.hpp"
#include "support/temp_dir.hpp"

using kiqd::test::config_error_of;

TEST_CASE("cron config: kiqd's cron list", "[cron][config]") {
    auto c = kiqd::parse_config(R"(
cron:
  - name: hourly_report
    cron: "0 * * * * Europe/Berlin"
    class: ReportJob
    args: [1, "two", {three: 3}, ~, true, "4"]
    queue: reports
  - name: tick
    cron: "*/10 * * * * *"
    class: Tick
    args: 7
    enabled: false
    date_as_argument: true
)",
                                "test.yml", "production");
    REQUIRE(c.cron.size() == 2);
    CHECK(c.cron[0].name == "hourly_report");
    CHECK(c.cron[0].cron == "0 * * * * Europe/Berlin");
    CHECK(c.cron[0].job_class == "ReportJob");
    CHECK(c.cron[0].queue == "reports");
    CHECK(c.cron[0].args_json == R"([1,"two",{"three":3},null,true,"4"])");
    CHECK_FALSE(c.cron[0].enabled.has_value());
    CHECK(c.cron[1].args_json == "[7]");  // a scalar is one argument, as the gem's parse_args
    CHECK(c.cron[1].enabled == false);
    CHECK(c.cron[1].date_as_argument);
}

TEST_CASE("cron config: sidekiq-scheduler's and sidekiq-cron's sections of a sidekiq.yml",
          "[cron][config]") {
    auto c = kiqd::parse_config(R"(
:concurrency: 5
:scheduler:
  :enabled: true
  :dynamic: true
  :schedule:
    hello_world:
      cron: '0 * * * * *'
      class: HelloWorld
      queue: low
      description: "says hello"
:schedule:
  nightly:
    cron: "0 3 * * *"
    class: Nightly
)",
                                "sidekiq.yml", "production");
    REQUIRE(c.cron.size() == 2);
    CHECK(c.cron[0].name == "hello_world");
    CHECK(c.cron[0].queue == "low");
    CHECK(c.cron[0].description == "says hello");
    CHECK(c.cron[1].name == "nightly");
    CHECK(c.cron[1].key == "schedule.nightly");
    // `enabled: false` turns sidekiq-scheduler's section off (still checked).
    auto off = kiqd::parse_config(
        ":scheduler:\n  :enabled: false\n  :schedule:\n    a: {cron: '* * * * *', class: A}\n",
        "sidekiq.yml", "production");
    CHECK(off.cron.empty());
}

TEST_CASE("cron config: bad entries name the key and line", "[cron][config]") {
    CHECK(config_error_of("cron:\n  - name: a\n    cron: \"0 25 * * *\"\n    class: A\n") ==
          "cron[0].cron (line 3): '0 25 * * *': hours field '25': not a valid value (nor is it a "
          "natural-language schedule fugit reads)");
    CHECK(config_error_of("cron:\n  - cron: \"* * * * *\"\n    class: A\n") ==
          "cron[0].name (line 2): is missing");
    CHECK(config_error_of("cron:\n  - name: a\n    class: A\n") ==
          "cron[0].cron (line 2): is missing (or every:, interval:, at:, in:)");
    CHECK(config_error_of("cron:\n  - name: a\n    cron: \"* * * * *\"\n") ==
          "cron[0].class (line 2): is missing");
    CHECK(config_error_of("cron:\n  - {name: a, cron: \"* * * * *\", class: A, queue: \"a b\"}\n")
              .find("cron[0].queue (line 2): invalid queue name") == 0);
    CHECK(config_error_of("cron:\n  - {name: a, cron: \"* * * * *\", class: A, colour: red}\n")
              .find("cron[0].colour (line 2): unknown key") == 0);
    CHECK(config_error_of(":scheduler:\n  :schedule:\n    a:\n      every: '7m'\n      class: A\n")
              .find("scheduler.schedule.a.every (line 4): '7m' does not divide") == 0);
    CHECK(config_error_of(":scheduler:\n  :schedule:\n    a:\n      at: 'soon'\n      class: A\n")
              .find("scheduler.schedule.a.at (line 4): 'soon' is not a time") == 0);
    CHECK(config_error_of(":scheduler:\n  :schedule:\n    a:\n      at: '2030/13/01'\n"
                          "      class: A\n")
              .find("scheduler.schedule.a.at (line 4): '2030/13/01' is not a valid time") == 0);
    CHECK(config_error_of(":scheduler:\n  :schedule:\n    a:\n      in: 'later'\n"
                          "      class: A\n")
              .find("scheduler.schedule.a.in (line 4): 'later' is not a duration") == 0);
    CHECK(config_error_of(":scheduler:\n  :schedule:\n    a:\n      in: '1h'\n"
                          "      cron: '* * * * *'\n      class: A\n") ==
          "scheduler.schedule.a (line 4): takes one of cron:, every:, interval:, at: and in:");
    CHECK(config_error_of("cron:\n  reschedule_grace_period: -5\n") ==
          "cron.reschedule_grace_period (line 2): must be 0 or more seconds");
    CHECK(config_error_of("cron:\n  history_size: 0\n") ==
          "cron.history_size (line 2): must be between 1 and 100000");
    CHECK(config_error_of("cron:\n  layout: v3\n") ==
          "cron.layout (line 2): must be auto, v1 (sidekiq-cron 1.x) or v2 (2.x)");
    CHECK(config_error_of("cron_schedule_file: /nonexistent/schedule.yml\n")
              .find("cron_schedule_file (line 1): cannot read '/nonexistent/schedule.yml'") == 0);
    CHECK(config_error_of("cron:\n  - {name: a, cron: \"every blue moon\", class: A}\n")
              .find("cron[0].cron (line 2): 'every blue moon'") == 0);
    CHECK(config_error_of("cron:\n  - {name: a, cron: \"* * * * *\", class: A}\n"
                          "  - {name: a, cron: \"0 * * * *\", class: B}\n") ==
          "cron[1] (line 3): the schedule name 'a' is used twice");
    CHECK(config_error_of("cron: 5\n") ==
          "cron (line 1): must be a list of {name, cron, class, ...} or a map");
    CHECK(config_error_of("cron_poll_interval: -1\n").find("cron_poll_interval (line 1)") == 0);
    CHECK(config_error_of("cron:\n  - {name: a, cron: \"0 * * * * Mars/Olympus\", class: A}\n") ==
          "cron[0].cron (line 2): '0 * * * * Mars/Olympus': unknown time zone 'Mars/Olympus' (nor "
          "is it a natural-language schedule fugit reads)");
}

TEST_CASE("cron store: the gem's time formats", "[cron]") {
    CHECK(kiqd::ruby_float_text(1764151200.0) == "1764151200.0");
    CHECK(kiqd::ruby_float_text(1764064805.25) == "1764064805.25");
    CHECK(kiqd::iso8601_utc(1795687200) == "2026-11-26T10:00:00Z");
    CHECK(kiqd::last_enqueue_time_text(1795687205.7) == "2026-11-26 10:00:05 +0000");
    CHECK(kiqd::ruby_time_text(1795687205.7) == "2026-11-26 10:00:05 UTC");
    CHECK(kiqd::parse_enqueue_time("2026-11-26 10:00:05 +0000") == 1795687205);
    CHECK(kiqd::parse_enqueue_time("2026-11-26 11:00:05 +0100") == 1795687205);
    CHECK(kiqd::parse_enqueue_time("2026-11-26 10:00:05 UTC") == 1795687205);
    CHECK(kiqd::parse_enqueue_time("2026-11-26T10:00:05.123Z") == 1795687205);
    CHECK(kiqd::parse_enqueue_time("2026-11-26T05:00:05-05:00") == 1795687205);
    CHECK_FALSE(kiqd::parse_enqueue_time("yesterday").has_value());
    CHECK_FALSE(kiqd::parse_enqueue_time("").has_value());
}

TEST_CASE("cron config: layout, namespaces, every: and a schedule file", "[cron][config]") {
    auto c = kiqd::parse_config(R"(
cron:
  layout: v2
  namespace: billing
  namespaces: [billing, reports]
  reschedule_grace_period: 300
  history_size: 25
  schedule:
    - {name: a, cron: "every day at 5pm", class: A}
    - {name: b, cron: "0 * * * *", class: B, namespace: reports}
:scheduler:
  :schedule:
    c: {every: '15m', class: C}
    d: {every: ['2h', {first_in: '1m'}], class: D}
    e: {interval: '30s', class: E}
)",
                                "test.yml", "");
    CHECK(c.cron_layout == kiqd::CronLayoutSetting::v2);
    CHECK(c.cron_namespace == "billing");
    CHECK(c.cron_namespaces == std::vector<std::string>{"billing", "reports"});
    CHECK(c.cron_reschedule_grace_period == 300);
    CHECK(c.cron_history_size == 25);
    // The gem's defaults when unset.
    CHECK(kiqd::parse_config("cron: []\n", "test.yml", "").cron_reschedule_grace_period == 60);
    CHECK(kiqd::parse_config("cron: []\n", "test.yml", "").cron_history_size == 10);
    REQUIRE(c.cron.size() == 5);
    CHECK(c.cron[1].ns == "reports");
    CHECK(c.cron[2].cron == "*/15 * * * *");
    CHECK(c.cron[3].cron == "0 */2 * * *");
    CHECK(c.cron[4].cron == "*/30 * * * * *");

    // sidekiq-scheduler's one-off runs: at: a time (zone given, or the local zone), in: a
    // duration after each start; no cron line.
    auto once = kiqd::parse_config(R"(
:scheduler:
  :schedule:
    a: {at: '2030/12/12 23:30:00 UTC', class: A}
    b: {at: '2030-12-12T23:30:00+09:00', class: B}
    c: {at: '2030/07/01 12:00 Europe/Berlin', class: C}
    d: {at: ['2030/12/12', {}], class: D}
    e: {in: '1h30m', class: E}
)",
                                   "test.yml", "");
    REQUIRE(once.cron.size() == 5);
    for (const auto& s : once.cron) CHECK(s.cron.empty());
    CHECK(once.cron[0].once_at == 1923348600.0);
    CHECK(once.cron[1].once_at == 1923316200.0);
    CHECK(once.cron[2].once_at == 1909130400.0);  // 10:00 UTC: Berlin's summer time
    CHECK(once.cron[4].once_in == 5400.0);
    CHECK_FALSE(once.cron[4].once_at);
    // Without a zone: the local one, $TZ first (as Ruby reads it).
    const char* tz = std::getenv("TZ");
    const std::string saved = tz ? tz : "";
    setenv("TZ", "Asia/Tokyo", 1);
    auto local = kiqd::parse_config(
        ":scheduler:\n  :schedule:\n    d: {at: '2030/12/12', class: D}\n", "test.yml", "");
    if (tz)
        setenv("TZ", saved.c_str(), 1);
    else
        unsetenv("TZ");
    CHECK(local.cron[0].once_at == 1923264000.0 - 9 * 3600);  // midnight in Tokyo

    // sidekiq-cron's schedule.yml: a map name → job (or a list), after ERB, as the gem reads it.
    kiqd::test::TempDir dir;
    const std::string path = dir.path() + "/schedule.yml";
    std::ofstream(path) << "hourly:\n  cron: \"0 * * * *\"\n  class: <%= "
                           "ENV.fetch('KIQD_CRON_TEST_UNSET', 'Hourly') %>\n"
                           "  namespace: reports\n";
    auto f = kiqd::parse_config("cron_schedule_file: " + path + "\n", "test.yml", "");
    REQUIRE(f.cron.size() == 1);
    CHECK(f.cron[0].name == "hourly");
    CHECK(f.cron[0].job_class == "Hourly");
    CHECK(f.cron[0].ns == "reports");
    // The gem's fallback: schedule.yml named, schedule.yaml there.
    std::rename(path.c_str(), (dir.path() + "/schedule.yaml").c_str());
    CHECK(kiqd::parse_config("cron_schedule_file: " + path + "\n", "test.yml", "").cron.size() ==
          1);
}
