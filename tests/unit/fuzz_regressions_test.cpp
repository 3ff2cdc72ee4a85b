// Regression tests for bugs found by the libFuzzer targets (tests/fuzz/): each input is the
// (minimised) one the fuzzer found, checked against the contract it broke.
#include <catch2/catch.hpp>
#include <limits>
#include <nlohmann/json.hpp>

#include "job/job_retry.hpp"
#include "kiqd/config.hpp"
#include "support/job_of.hpp"

using namespace kiqd;

TEST_CASE("fuzz: retry_count at the limits of long long does not overflow", "[fuzz][retry]") {
    Keys keys;
    DeadSet dead{keys, 10000, 15552000, Compat::v6};
    JobRetry retry{Compat::v6, 25, keys, dead};
    std::mt19937_64 rng{42};
    Failure failure{"RuntimeError", "boom", {}};
    // Found by fuzz_payload: retry_count + 1 was a signed overflow (UBSan), and any count above
    // ~55,000 overflowed count⁴ in the delay.
    for (const std::string count :
         {"9223372036854775807", "100000", "-9223372036854775808", "-5"}) {
        auto job = kiqd::test::job_of(R"({"class":"A","args":[],"retry":1000000,"retry_count":)" +
                                      count + "}");
        auto plan = retry.plan(job, failure, 1.7e9, rng);
        auto edited = nlohmann::json::parse(plan.payload);
        INFO("retry_count " << count);
        CHECK(edited["retry_count"].is_number_integer());
        CHECK(plan.score >= 1.7e9);
    }
    for (long long count : {std::numeric_limits<long long>::min(), -1LL, 55109LL,
                            std::numeric_limits<long long>::max()}) {
        for (Compat compat : {Compat::v6, Compat::v8}) {
            const long long d = JobRetry::delay_seconds(count, compat, rng);
            CHECK(d >= 15);
        }
    }
}

TEST_CASE("fuzz: a long unterminated or oversized ERB tag is an error or text, not a crash",
          "[fuzz][config]") {
    // Found by fuzz_config: std::regex recursed once per character of "<%= …" and overflowed the
    // stack. The text after an unterminated tag is plain YAML text.
    const std::string unterminated = "queues: [a]\ntag: <%= " + std::string(300000, 'x') + "\n";
    auto c = parse_config(unterminated, "x.yml", "");
    CHECK(c.tag.size() > 300000);
    const std::string long_body =
        "queues: [a]\ntag: <%= " + std::string(300000, ' ') + "ENV['HOME'] %>\n";
    try {
        parse_config(long_body, "x.yml", "");
        FAIL("no ConfigError");
    } catch (const ConfigError& e) {
        CHECK(e.key() == "<%= %>");
        CHECK(e.line() == 2);
    }
    setenv("KIQD_FUZZ_REGRESSION", "v", 1);
    CHECK(expand_erb("a <%= ENV['KIQD_FUZZ_REGRESSION'] %> b <%= ENV.fetch('KIQD_NOPE', 'd') %>"
                     "<%= ENV['KIQD_NOPE'] || 5 %> <%>") == "a v b d5 <%>");
}

TEST_CASE("fuzz: a key that is only ':' or empty is named in the error", "[fuzz][config]") {
    // Found by fuzz_config: ":: 8" made a ConfigError whose key was empty.
    auto key_of = [](const std::string& yaml) -> std::string {
        try {
            parse_config(yaml, "t.yml", "production");
        } catch (const ConfigError& e) {
            return e.key();
        }
        return "(no error)";
    };
    CHECK(key_of("---\n:: 8\n:queues:\n  - critical\n") == ":");
    CHECK(key_of("\"\": 1\n") == "(empty key)");
    CHECK(key_of(":concurrency: 4\n") == "(no error)");  // Sidekiq's colon keys still work
}

TEST_CASE("fuzz: control bytes in a key are shown escaped, never cut the message",
          "[fuzz][config]") {
    // Found by fuzz_config: a quoted key starting with NUL bytes gave an empty what().
    try {
        parse_config(std::string("queues: [a]\n'\0\0x': 1\n", 21), "t.yml", "production");
        FAIL("no error");
    } catch (const ConfigError& e) {
        CHECK(std::string(e.what()) == "\\x00\\x00x (line 2): unknown key");
    }
}

TEST_CASE("fuzz: a huge number of seconds is out of range, not an overflow", "[fuzz][config]") {
    // Found by fuzz_config (UBSan): "timeout: 2111…1" overflowed the milliseconds.
    try {
        parse_config("timeout: 2" + std::string(60, '1') + "\nqueues: [a]\n", "t.yml",
                     "production");
        FAIL("no error");
    } catch (const ConfigError& e) {
        CHECK(std::string(e.what()) ==
              "timeout (line 1): must be at most 31622400 seconds (366 days)");
    }
    CHECK_THROWS_AS(parse_config("timeout: .nan\n", "t.yml", "production"), ConfigError);
}
