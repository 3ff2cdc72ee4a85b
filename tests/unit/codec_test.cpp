#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>

#include "common/ruby_float.hpp"
#include "job/backtrace_codec.hpp"
#include "job/raw_json_object.hpp"
#include "kiqd/clock.hpp"
#include "kiqd/redis/endpoint.hpp"

using namespace kiqd;

TEST_CASE("backtraces round-trip, and Ruby's MIME Base64 output decodes", "[codec]") {
    std::vector<std::string> lines{"app/x.rb:1:in `perform'", "caf\xc3\xa9", ""};
    auto enc = encode_backtrace(lines);
    CHECK(enc.find('\n') == std::string::npos);  // strict Base64
    CHECK(decode_backtrace(enc) == lines);
    // Produced by Ruby: Base64.encode64(Zlib::Deflate.deflate(JSON.generate([...] * 4)))
    const std::string ruby =
        "eJyLVkosKNDPyk8q1q/QK0qyMjSwysxTSChILUrLL8pVV9JRyslM0q8ESRmD\n"
        "ZZITc3JAwkNAWywA5sVG6Q==\n";
    auto decoded = decode_backtrace(ruby);
    REQUIRE(decoded);
    REQUIRE(decoded->size() == 8);
    CHECK((*decoded)[0] == "app/jobs/x.rb:10:in `perform'");
    CHECK_FALSE(decode_backtrace("not base64!"));
    CHECK(base64_encode("ab") == "YWI=");
    CHECK(base64_decode("YWI=") == std::string("ab"));
}

TEST_CASE("RawJsonObject edits top-level members only", "[codec]") {
    auto obj = RawJsonObject::parse(R"( {"a" : [1, {"queue":"x"}], "queue":"q", "n":1.0E5} )");
    REQUIRE(obj);
    CHECK(*obj->find("a") == R"([1, {"queue":"x"}])");
    obj->set_string("queue", "retry_me");
    obj->set("retry_count", "0");
    CHECK(obj->dump() ==
          R"({"a":[1, {"queue":"x"}],"queue":"retry_me","n":1.0E5,"retry_count":0})");
    obj->erase("n");
    CHECK_FALSE(obj->contains("n"));
    CHECK_FALSE(RawJsonObject::parse("[1,2]"));
    CHECK_FALSE(RawJsonObject::parse("{\"a\":"));
    CHECK(RawJsonObject::parse("{}")->dump() == "{}");
    // Nested deeper than the fast scan goes: judged and read by the slow path, the same result.
    const std::string deep = R"({"args":)" + std::string(300, '[') + std::string(300, ']') + "}";
    REQUIRE(RawJsonObject::parse(deep));
    CHECK(RawJsonObject::parse(deep)->dump() == deep);
    CHECK_FALSE(RawJsonObject::parse(deep + "x"));
    CHECK(json_nesting_depth(R"({"a":[[["]]]]]"]]]})") == 4);
    CHECK(json_string("\xff") == "\"\xef\xbf\xbd\"");  // invalid UTF-8 becomes U+FFFD
}

TEST_CASE("payload timestamps per Sidekiq major", "[codec]") {
    CHECK(payload_timestamp(Compat::v6, 1700000000.0) == "1700000000.0");  // always a point
    CHECK(payload_timestamp(Compat::v7, 1700000000.123456) == "1700000000.123456");
    // Ruby's Float#to_s: no trailing zero (Ruby writes 1795695077.69526, and a reschedule that
    // re-generates the payload must find kiqd's bytes), microseconds at most.
    CHECK(payload_timestamp(Compat::v6, 1795695077.69526) == "1795695077.69526");
    CHECK(payload_timestamp(Compat::v7, 1795695077.6952603) == "1795695077.69526");
    CHECK(score_text(1795695077.1) == "1795695077.1");
    CHECK(payload_timestamp(Compat::v8, 1700000000.1234) == "1700000000123");
    CHECK(timestamp_seconds(1700000000123.0, true) == Approx(1700000000.123));
    CHECK(timestamp_seconds(1700000000.5, false) == 1700000000.5);
}

// Ruby's two float writers: Float#to_s (the shortest digits) and the json gem's own since 2.10
// (Grisu2, sometimes a digit longer). The pairs below are what Ruby 3.3 with json 3.1.0 writes.
TEST_CASE("the json gem's float text, and payload timestamps both Ruby writers keep", "[codec]") {
    CHECK(kiqd::ruby_float_text(1814033939.7751229) == "1814033939.775123");
    CHECK(kiqd::json_gem_float_text(1814033939.7751229) == "1814033939.7751229");
    CHECK(kiqd::json_gem_float_text(1796007562.231408) == "1796007562.2314081");
    CHECK(kiqd::json_gem_float_text(1700000000.0) == "1700000000.0");
    CHECK(kiqd::json_gem_float_text(-0.000025) == "-0.000025");
    CHECK(kiqd::json_gem_float_text(1e20) == "1e+20");
    CHECK(kiqd::json_gem_float_text(1.5e-10) == "1.5e-10");
    // A timestamp the two write differently is moved by a few microseconds to one they write
    // alike; over a year of microsecond timestamps, every one comes back unchanged from both.
    CHECK(payload_timestamp(Compat::v7, 1796007562.231408) != "1796007562.231408");
    size_t moved = 0;
    for (int i = 0; i < 100000; ++i) {
        const double t = std::round((1796007562.0 + i * 315.36 + i * 0.000001) * 1e6) / 1e6;
        const std::string text = payload_timestamp(Compat::v7, t);
        const double back = std::strtod(text.c_str(), nullptr);
        INFO(text);
        REQUIRE(kiqd::ruby_float_text(back) == text);
        REQUIRE(kiqd::json_gem_float_text(back) == text);
        REQUIRE(std::abs(back - t) <= 3.5e-6);
        if (text != kiqd::ruby_float_text(t)) ++moved;
    }
    CHECK(moved > 0);  // the case is real: some were moved
}

TEST_CASE("Redis URLs", "[codec]") {
    auto e = redis::parse_redis_url("redis://user:p%40ss@10.0.0.5:6380/3");
    CHECK(e.host == "10.0.0.5");
    CHECK(e.port == 6380);
    CHECK(e.db == 3);
    CHECK(e.username == "user");
    CHECK(e.password == "p@ss");
    CHECK(e.describe().find("p@ss") == std::string::npos);
    CHECK(redis::parse_redis_url("redis://:secret@localhost").password == "secret");
    CHECK(redis::parse_redis_url("redis://[::1]:7000").host == "::1");
    CHECK(redis::parse_redis_url("unix:///run/redis.sock?db=2").unix_path == "/run/redis.sock");
    CHECK(redis::parse_redis_url("rediss://x").tls);
    CHECK_THROWS_AS(redis::parse_redis_url("redis://x:99999"), std::invalid_argument);
    CHECK_THROWS_AS(redis::parse_redis_url("http://x"), std::invalid_argument);
}
