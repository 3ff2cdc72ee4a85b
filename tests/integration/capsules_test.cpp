// Sidekiq 7's capsules in one kiqd process, against a real redis-server: each capsule's queues
// are served by its own threads, never more at once than its concurrency; the process record
// carries Sidekiq 7.3's totals and weights, Sidekiq 8's `capsules` and kiqd's per-capsule busy
// counts, which `kiqd processes` shows; check-config prints each capsule.
#include <signal.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "kiqd/client.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using kiqd::test::kiqd_config;
using kiqd::test::KiqdProcess;
using kiqd::test::llen;
using kiqd::test::RedisServer;
using kiqd::test::wait_until;

namespace {

// Default capsule: 2 threads on `default`; `reports`: 1 thread on `reports`; `bulk`: 2 threads
// on `bulk` and `bulk_low`, weighted 3:1.
const char* kCapsules =
    "concurrency: 2\ntimeout: 1\nqueues: [default]\n"
    ":capsules:\n"
    "  :reports:\n    :concurrency: 1\n    :queues: [reports]\n"
    "  bulk:\n    concurrency: 2\n    queues: [[bulk, 3], [bulk_low, 1]]\n";

// The identity of the only process in `processes`, once it has registered.
std::string registered_identity(redis::Connection& c) {
    REQUIRE(wait_until([&] { return kiqd::test::only_member(c, "processes").has_value(); }));
    return *kiqd::test::only_member(c, "processes");
}

// The process's kiqd_capsules field, parsed (null until the first beat).
nlohmann::json capsule_busy(redis::Connection& c, const std::string& id) {
    const auto text = c.command({"HGET", id, "kiqd_capsules"}).optional_str();
    return text ? nlohmann::json::parse(*text) : nlohmann::json();
}

// How many busy-hash entries run a job from `queue`.
long long running_from(redis::Connection& c, const std::string& id, const std::string& queue) {
    long long n = 0;
    const auto all = c.command({"HGETALL", id + ":work"});
    for (size_t i = 1; i < all.size(); i += 2)
        if (nlohmann::json::parse(all[i].str())["queue"] == queue) ++n;
    return n;
}

void push_sleeps(Client& client, redis::Connection& conn, const std::string& queue, int n) {
    for (int i = 0; i < n; ++i)
        client.push(conn, {{"class", "Kiqd::Sleep"}, {"args", {60}}, {"queue", queue}});
}

}  // namespace

TEST_CASE("capsules: each capsule's queues run on its own threads, at most its concurrency",
          "[capsules]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    Client client(Keys{}, Compat::v6);
    KiqdProcess kiqd(KIQD_BINARY, kiqd_config(server, kCapsules));
    const std::string id = registered_identity(conn);

    // Four long jobs for the one-thread `reports` capsule: one runs, three wait, although the
    // default capsule's two threads and bulk's two are idle.
    push_sleeps(client, conn, "reports", 4);
    REQUIRE(wait_until([&] {
        return running_from(conn, id, "reports") == 1 && llen(conn, "queue:reports") == 3;
    }));
    // Three for the default capsule: its two threads take two. Were any idle thread of the
    // process fetching `reports` too, it would have taken one of the three waiting there first.
    push_sleeps(client, conn, "default", 3);
    REQUIRE(wait_until([&] {
        return running_from(conn, id, "default") == 2 && llen(conn, "queue:default") == 1;
    }));
    // Bulk's two threads take one job from each of its queues' five.
    push_sleeps(client, conn, "bulk", 3);
    push_sleeps(client, conn, "bulk_low", 2);
    REQUIRE(wait_until([&] {
        return running_from(conn, id, "bulk") + running_from(conn, id, "bulk_low") == 2 &&
               llen(conn, "queue:bulk") + llen(conn, "queue:bulk_low") == 3;
    }));
    CHECK(llen(conn, "queue:reports") == 3);
    CHECK(running_from(conn, id, "reports") == 1);
    CHECK(running_from(conn, id, "default") == 2);
    CHECK(conn.command({"HLEN", id + ":work"}).integer() == 5);

    // Per-capsule busy counts (kiqd's field) and the process's total, once a beat has seen all.
    const nlohmann::json expected = {{"default", {{"busy", 2}, {"concurrency", 2}}},
                                     {"reports", {{"busy", 1}, {"concurrency", 1}}},
                                     {"bulk", {{"busy", 2}, {"concurrency", 2}}}};
    REQUIRE(
        wait_until([&] { return capsule_busy(conn, id) == expected; }, std::chrono::seconds(15)));
    CHECK(conn.command({"HGET", id, "busy"}).str() == "5");

    // `kiqd processes` shows each capsule's busy/concurrency.
    auto [status, out] = kiqd::test::run_command(
        {KIQD_BINARY, "processes"}, {{"REDIS_URL", server.url()}, {"KIQD_CONFIG", ""}});
    CHECK(status == 0);
    CHECK_THAT(out, Catch::Contains("CAPSULES") &&
                        Catch::Contains("default 2/2, reports 1/1, bulk 2/2") &&
                        Catch::Contains("5/5"));
    auto [jstatus, jout] = kiqd::test::run_command(
        {KIQD_BINARY, "processes", "--json"}, {{"REDIS_URL", server.url()}, {"KIQD_CONFIG", ""}});
    CHECK(jstatus == 0);
    const auto procs = nlohmann::json::parse(jout);
    REQUIRE(procs.size() == 1);
    CHECK(procs[0]["capsules"] == expected);
    CHECK(procs[0]["concurrency"] == 5);

    // So does one frame of `kiqd top` (stdin not a terminal: one frame, then exit).
    auto [tstatus, tout] =
        kiqd::test::run_command({"/bin/sh", "-c", "exec \"$0\" top </dev/null", KIQD_BINARY},
                                {{"REDIS_URL", server.url()}, {"KIQD_CONFIG", ""}});
    CHECK(tstatus == 0);
    CHECK_THAT(
        tout, Catch::Contains("CAPSULES") && Catch::Contains("default 2/2, reports 1/1, bulk 2/2"));

    // A stop pushes every capsule's running jobs back.
    CHECK(kiqd.stop() == 0);
    CHECK(llen(conn, "queue:reports") == 4);
    CHECK(llen(conn, "queue:default") == 3);
    CHECK(llen(conn, "queue:bulk") + llen(conn, "queue:bulk_low") == 5);
    CHECK_THAT(kiqd.output(), Catch::Contains("Pushed 5 jobs back to Redis"));
}

TEST_CASE("capsules: the heartbeat's info is Sidekiq 7.3's with capsules (and 8's capsules)",
          "[capsules]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    KiqdProcess kiqd(KIQD_BINARY, kiqd_config(server, kCapsules));
    const std::string id = registered_identity(conn);
    REQUIRE(wait_until([&] { return conn.command({"HEXISTS", id, "info"}).integer() == 1; }));
    const auto info = nlohmann::json::parse(conn.command({"HGET", id, "info"}).str());
    // Launcher#to_data: total_concurrency, every capsule's queues once, one weights hash each.
    CHECK(info["concurrency"] == 5);
    CHECK(info["queues"] == nlohmann::json::array({"default", "reports", "bulk", "bulk_low"}));
    CHECK(info["weights"] ==
          nlohmann::json::parse(R"([{"default":0},{"reports":0},{"bulk":3,"bulk_low":1}])"));
    // Sidekiq 8's Capsule#to_h per capsule.
    CHECK(info["capsules"] ==
          nlohmann::json::parse(
              R"({"default":{"concurrency":2,"mode":"strict","weights":{"default":0}},
            "reports":{"concurrency":1,"mode":"strict","weights":{"reports":0}},
            "bulk":{"concurrency":2,"mode":"weighted","weights":{"bulk":3,"bulk_low":1}}})"));
    CHECK(conn.command({"HGET", id, "concurrency"}).str() == "5");
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("capsules: jobs pushed to every capsule all run once", "[capsules]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    Client client(Keys{}, Compat::v6);
    KiqdProcess kiqd(KIQD_BINARY, kiqd_config(server, kCapsules));
    for (const std::string q : {"default", "reports", "bulk", "bulk_low"})
        for (int i = 0; i < 250; ++i) client.push(conn, {{"class", "Kiqd::Noop"}, {"queue", q}});
    REQUIRE(wait_until(
        [&] {
            const auto p = conn.command({"GET", "stat:processed"}).optional_str();
            return p && *p == "1000";
        },
        std::chrono::seconds(30)));
    for (const std::string q : {"default", "reports", "bulk", "bulk_low"})
        CHECK(llen(conn, "queue:" + q) == 0);
    CHECK(conn.command({"GET", "stat:failed"}).optional_str().value_or("0") == "0");
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("capsules: check-config prints each capsule; a bad one exits 78 naming the key",
          "[capsules]") {
    auto [code, out] = kiqd::test::check_config(KIQD_BINARY, kCapsules);
    CHECK(code == 0);
    CHECK_THAT(out,
               Catch::Contains("capsule default: concurrency=2, queues default (strict)") &&
                   Catch::Contains("capsule reports: concurrency=1, queues reports (strict)") &&
                   Catch::Contains("capsule bulk: concurrency=2, queues bulk:3,bulk_low:1 "
                                   "(weighted)") &&
                   Catch::Contains("Redis connections per process (5 processors (default 2, "
                                   "reports 1, bulk 2) + heartbeat"));
    KiqdProcess bad(KIQD_BINARY,
                    "redis: {url: redis://127.0.0.1:1/0}\nqueues: [a]\n"
                    "capsules:\n  reports:\n    concurrency: 0\n    queues: [r]\n");
    CHECK(bad.wait_exit() == 78);
    CHECK_THAT(bad.output(), Catch::Contains("capsules.reports.concurrency (line 5): must be "
                                             "between 1 and 1000"));
}
