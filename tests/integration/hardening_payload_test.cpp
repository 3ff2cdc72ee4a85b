// Hardening [hardening][payload]: payloads on which kiqd's parsers once disagreed — a UTF-8
// byte-order mark before the JSON, a NUL byte after it — pushed to a real Redis, in a queue and
// in the schedule, and run by a real kiqd. Ruby's JSON.parse refuses both, so Sidekiq would send
// them to the dead set as they are; kiqd must too: each one in the dead set exactly once with its
// original bytes and a reason, the well-formed jobs beside them run or retried with class, args
// and jid intact, nothing left behind and nothing lost. (Before, the mark was skipped by the
// slow parser, the job ran, and its retry entry lost class, args and jid.)
#include <signal.h>

#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>

#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/wait_until.hpp"

using kiqd::test::counter;
using kiqd::test::KiqdProcess;
using kiqd::test::llen;
using kiqd::test::RedisServer;
using kiqd::test::wait_until;
using kiqd::test::zcard;
using kiqd::test::zrange;

namespace {

const std::string kBom = "\xEF\xBB\xBF";

std::string payload_job(const std::string& cls, const std::string& jid, const std::string& args) {
    return R"({"class":")" + cls + R"(","args":)" + args + R"(,"jid":")" + jid +
           R"(","queue":"default","retry":3})";
}

std::string with_nul(std::string text, const std::string& after) {
    text += '\0';
    return text + after;
}

}  // namespace

TEST_CASE("hardening: a byte-order mark or a NUL byte sends the job to the dead set whole",
          "[hardening][payload]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    // Refused payloads, by the jid inside them (each keeps its bytes in the dead set).
    const std::map<std::string, std::string> refused = {
        {"bom-noop", kBom + payload_job("Kiqd::Noop", "bom-noop", "[1]")},
        {"bom-fail", kBom + payload_job("Kiqd::Fail", "bom-fail", R"(["boom"])")},
        {"bom-ws-fail", kBom + " \n" + payload_job("Kiqd::Fail", "bom-ws-fail", R"(["boom"])")},
        {"nul-noop", with_nul(payload_job("Kiqd::Noop", "nul-noop", "[2]"), "junk")},
        {"nul-fail", with_nul(payload_job("Kiqd::Fail", "nul-fail", R"(["boom"])"), "")},
        {"bom-sched", kBom + payload_job("Kiqd::Noop", "bom-sched", "[3]")},
        {"nul-sched", with_nul(payload_job("Kiqd::Noop", "nul-sched", "[4]"), "{}")},
    };
    const std::string good_fail = payload_job("Kiqd::Fail", "good-fail", R"(["boom"])");
    const std::string good_noop = payload_job("Kiqd::Noop", "good-noop", "[5]");
    conn.command({"SADD", "queues", "default"});
    for (const auto& [jid, raw] : refused) {
        if (jid.ends_with("-sched"))
            conn.command({"ZADD", "schedule", "0", raw});  // due: the scheduler moves it
        else
            conn.command({"LPUSH", "queue:default", raw});
    }
    conn.command({"LPUSH", "queue:default", good_fail, good_noop});

    KiqdProcess kiqd(KIQD_BINARY,
                     kiqd::test::kiqd_config(server, "concurrency: 2\nqueues: [default]\n"));
    const bool settled = wait_until(
        [&] {
            return zcard(conn, "dead") == static_cast<long long>(refused.size()) &&
                   zcard(conn, "retry") == 1 && zcard(conn, "schedule") == 0 &&
                   llen(conn, "queue:default") == 0 && counter(conn, "stat:processed") == 2;
        },
        std::chrono::seconds(30));
    INFO("dead " << zcard(conn, "dead") << ", retry " << zcard(conn, "retry") << ", schedule "
                 << zcard(conn, "schedule") << ", queue " << llen(conn, "queue:default")
                 << ", processed " << counter(conn, "stat:processed") << "\nkiqd output:\n"
                 << kiqd.output());
    REQUIRE(settled);
    CHECK(kiqd.running());
    kiqd.signal(SIGTERM);
    CHECK(kiqd.wait_exit() == 0);

    // Each refused payload once, its original bytes in args[0], with the reason.
    std::map<std::string, std::string> dead_by_raw;
    for (const auto& member : zrange(conn, "dead")) {
        const auto entry = nlohmann::json::parse(member);
        INFO(member);
        CHECK(entry["class"] == "Kiqd::InvalidJob");
        CHECK(entry["error_class"] == "JSON::ParserError");
        CHECK_FALSE(entry["error_message"].get<std::string>().empty());
        CHECK(entry["queue"] == "default");
        REQUIRE(entry["args"].size() == 1);
        dead_by_raw[entry["args"][0].get<std::string>()] = member;
    }
    CHECK(dead_by_raw.size() == refused.size());
    for (const auto& [jid, raw] : refused) {
        INFO(jid);
        REQUIRE(dead_by_raw.count(raw) == 1);
        const auto why =
            nlohmann::json::parse(dead_by_raw[raw])["error_message"].get<std::string>();
        CHECK_THAT(why, Catch::Contains(jid.starts_with("bom") ? "byte-order mark" : "NUL byte"));
    }
    // The well-formed failure: a Sidekiq retry entry with class, args and jid as they were.
    const auto retries = zrange(conn, "retry");
    REQUIRE(retries.size() == 1);
    const auto retry = nlohmann::json::parse(retries[0]);
    CHECK(retry["class"] == "Kiqd::Fail");
    CHECK(retry["args"] == nlohmann::json::array({"boom"}));
    CHECK(retry["jid"] == "good-fail");
    CHECK(retry["retry_count"] == 0);
    CHECK(retry["error_message"] == "boom");
    // Two ran (one failed); the refused ones never reached a handler.
    CHECK(counter(conn, "stat:failed") == 1);
}
