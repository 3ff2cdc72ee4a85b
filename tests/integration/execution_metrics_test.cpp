// Sidekiq 7/8's execution metrics written by a real kiqd into a real Redis: in compat 8 the minute
// hash, the ten-minute hash and the h| histograms with their expiries; in compat 6 nothing;
// under compat auto alone, the layouts of 7 and 8 both.
// (Sidekiq 7.3's own Metrics::Query reads kiqd's 7 layout in
// tests/interop/test_sidekiq7_interop.rb.)
#include <catch2/catch.hpp>

#include "kiqd/client.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_server.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using kiqd::test::KiqdProcess;
using kiqd::test::RedisServer;
using kiqd::test::wait_until;

namespace {

std::vector<std::string> keys_matching(redis::Connection& c, const std::string& pattern) {
    std::vector<std::string> out;
    auto r = c.command({"KEYS", pattern});
    for (size_t i = 0; i < r.size(); ++i) out.emplace_back(r[i].str());
    return out;
}

// The sum of one field over the hashes `keys`.
long long field_sum(redis::Connection& c, const std::vector<std::string>& keys,
                    const std::string& field) {
    long long sum = 0;
    for (const auto& k : keys)
        if (auto v = c.command({"HGET", k, field}).optional_str()) sum += std::stoll(*v);
    return sum;
}

}  // namespace

TEST_CASE("metrics: compat 8 writes Sidekiq 8's minute, ten-minute and histogram keys",
          "[metrics][sidekiq8]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    Client client(Keys{}, Compat::v8);
    for (int i = 0; i < 3; ++i) client.push(conn, {{"class", "Kiqd::Noop"}});
    client.push(conn, {{"class", "Kiqd::Fail"}, {"args", {"x"}}, {"retry", false}});
    KiqdProcess kiqd(KIQD_BINARY, kiqd_config(server, "compat: 8\nqueues: [default]\n"));
    // Minute keys "j|yymmdd|H:MM" end in two digits, ten-minute keys "j|yymmdd|H:M" in one.
    REQUIRE(wait_until(
        [&] {
            return field_sum(conn, keys_matching(conn, "j|??????|*:[0-9][0-9]"), "Kiqd::Noop|p") ==
                   3;
        },
        std::chrono::seconds(25)));
    // The Fail ran before its minute's flush or in the next; wait for its count too.
    REQUIRE(wait_until([&] {
        return field_sum(conn, keys_matching(conn, "j|??????|*:[0-9][0-9]"), "Kiqd::Fail|f") == 1;
    }));
    const auto minutes = keys_matching(conn, "j|??????|*:[0-9][0-9]");
    const auto tens = keys_matching(conn, "j|??????|*:[0-9]");
    REQUIRE_FALSE(tens.empty());
    CHECK(field_sum(conn, tens, "Kiqd::Noop|p") == 3);
    CHECK(field_sum(conn, tens, "Kiqd::Fail|p") == 1);
    CHECK(field_sum(conn, tens, "Kiqd::Fail|f") == 1);
    CHECK(field_sum(conn, minutes, "Kiqd::Fail|ms") == 0);  // failures are not timed
    for (const auto& k : minutes) {
        const auto ttl = conn.command({"TTL", k}).integer();
        CHECK(ttl > 28000);
        CHECK(ttl <= 28800);
    }
    for (const auto& k : tens) {
        const auto ttl = conn.command({"TTL", k}).integer();
        CHECK(ttl > 258000);
        CHECK(ttl <= 259200);
    }
    // One histogram per class and minute, only for timed runs: 3 Noop runs over its buckets.
    const auto hists = keys_matching(conn, "h|Kiqd::Noop-*");
    REQUIRE_FALSE(hists.empty());
    CHECK(keys_matching(conn, "h|Kiqd::Fail-*").empty());
    long long runs = 0;
    for (const auto& k : hists) {
        redis::Command get{"BITFIELD_RO", k};
        for (int i = 0; i < 26; ++i) get.insert(get.end(), {"GET", "u16", "#" + std::to_string(i)});
        auto r = conn.command(get);
        for (size_t i = 0; i < r.size(); ++i) runs += r[i].integer();
        CHECK(conn.command({"TTL", k}).integer() <= 28800);
    }
    CHECK(runs == 3);
    // No Sidekiq 7 keys in compat 8.
    CHECK(keys_matching(conn, "j|20??????|*").empty());
    CHECK(keys_matching(conn, "Kiqd::*").empty());
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("metrics: compat 6 writes none", "[metrics]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    Client client(Keys{}, Compat::v6);
    for (int i = 0; i < 2; ++i) client.push(conn, {{"class", "Kiqd::Noop"}});
    KiqdProcess kiqd(KIQD_BINARY, kiqd_config(server, "compat: 6\nqueues: [default]\n"));
    REQUIRE(wait_until([&] {
        return conn.command({"GET", "stat:processed"}).optional_str() == std::string("2");
    }));
    CHECK(kiqd.stop() == 0);  // the last flush: stats and, were they on, the metrics
    CHECK(keys_matching(conn, "j|*").empty());
    CHECK(keys_matching(conn, "*Kiqd::Noop*").empty());
}

TEST_CASE("metrics: compat auto alone writes the layouts of 7 and 8 both", "[metrics]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    Client client(Keys{}, Compat::v6);
    for (int i = 0; i < 2; ++i) client.push(conn, {{"class", "Kiqd::Noop"}});
    // No compat key: auto, and no other process in the cluster.
    KiqdProcess kiqd(KIQD_BINARY, kiqd_config(server, "queues: [default]\n"));
    REQUIRE(wait_until([&] {
        return conn.command({"GET", "stat:processed"}).optional_str() == std::string("2");
    }));
    CHECK(kiqd.stop() == 0);  // the last flush writes what the beats had not
    // 7: "j|%Y%m%d|%-H:%-M" and "<Class>-%d-%H:%-M"; 8: "j|%y%m%d|%-H:%M" and "h|<Class>-…".
    CHECK(field_sum(conn, keys_matching(conn, "j|20??????|*"), "Kiqd::Noop|p") == 2);
    CHECK(field_sum(conn, keys_matching(conn, "j|??????|*:[0-9][0-9]"), "Kiqd::Noop|p") == 2);
    CHECK_FALSE(keys_matching(conn, "Kiqd::Noop-*").empty());
    CHECK_FALSE(keys_matching(conn, "h|Kiqd::Noop-*").empty());
    CHECK_THAT(kiqd.output(), Catch::Contains("no other Sidekiq process in the cluster; presenting "
                                              "as Sidekiq 6 (execution metrics in the layouts of "
                                              "7 and 8)"));
}
