// Redis's maxmemory-policy [eviction]: anything but noeviction can evict queues, locks and
// working lists in silence, so kiqd warns at start (the first heartbeat), once per change at the
// next beats, in `kiqd check-config` and on /metrics; a managed Redis that refuses CONFIG GET is
// read through INFO memory. Real redis-servers and kiqd processes.
#include "server/eviction_policy.hpp"

#include <catch2/catch.hpp>

#include "support/http_get.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_server.hpp"

using namespace kiqd;
using kiqd::test::KiqdProcess;
using kiqd::test::occurrences;
using kiqd::test::RedisServer;

TEST_CASE("eviction policy: read with CONFIG GET, or INFO memory where CONFIG is refused",
          "[eviction]") {
    RedisServer plain({"--maxmemory-policy", "allkeys-lru"});
    auto conn = plain.connect();
    CHECK(read_maxmemory_policy(conn) == "allkeys-lru");
    conn.command({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
    CHECK(read_maxmemory_policy(conn) == "noeviction");
    CHECK_FALSE(eviction_warning(std::string("noeviction")));
    // A managed Redis without CONFIG (renamed away): INFO still says.
    RedisServer managed(
        {"--maxmemory-policy", "volatile-lru", "--rename-command", "CONFIG", "kiqdhiddenconfig"});
    auto managed_conn = managed.connect();
    CHECK(read_maxmemory_policy(managed_conn) == "volatile-lru");
    const auto warning = eviction_warning(std::string("volatile-lru"));
    REQUIRE(warning);
    CHECK_THAT(*warning, Catch::Contains("volatile-lru, not noeviction"));
    CHECK_THAT(*warning, Catch::Contains("keys that have a TTL"));
    CHECK_THAT(*eviction_warning(std::nullopt), Catch::Contains("cannot tell"));
}

TEST_CASE(
    "eviction policy daemon: warned at start, once per change, in check-config and on /metrics",
    "[eviction][daemon]") {
    RedisServer server({"--maxmemory-policy", "allkeys-lru"});
    auto conn = server.connect();
    const int port = kiqd::test::free_port();
    const std::string yaml = kiqd::test::kiqd_config(
        server, "concurrency: 1\nqueues: [default]\n" + kiqd::test::metrics_listen(port));
    const auto [status, out] = kiqd::test::check_config(KIQD_BINARY, yaml);
    CHECK(status == 0);
    CHECK_THAT(out, Catch::Contains("warning: Redis maxmemory-policy is allkeys-lru"));

    KiqdProcess kiqd(KIQD_BINARY, yaml);
    REQUIRE(kiqd.wait_for_output("Redis maxmemory-policy is allkeys-lru, not noeviction",
                                 std::chrono::seconds(20)));
    const auto [code, metrics] = kiqd::test::http_get(port, "/metrics");
    CHECK(code == 200);
    CHECK_THAT(metrics, Catch::Contains("kiqd_redis_maxmemory_policy{policy=\"allkeys-lru\"} 1"));
    CHECK_THAT(metrics, Catch::Contains("kiqd_redis_noeviction 0"));
    conn.command({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
    REQUIRE(
        kiqd.wait_for_output("Redis maxmemory-policy is noeviction now", std::chrono::seconds(30)));
    CHECK_THAT(kiqd::test::http_get(port, "/metrics").second,
               Catch::Contains("kiqd_redis_noeviction 1"));
    CHECK(kiqd.stop() == 0);
    // One warning for the one change, whatever the number of beats.
    CHECK(occurrences(kiqd.output(), "not noeviction") == 1);
    const auto [status2, out2] = kiqd::test::check_config(KIQD_BINARY, yaml);
    CHECK(status2 == 0);
    CHECK_THAT(out2, Catch::Contains("Redis maxmemory-policy is noeviction"));
    CHECK(occurrences(out2, "warning") == 0);
}
