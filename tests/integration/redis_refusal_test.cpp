// Redis refusing writes [refusal]: out of memory under maxmemory with noeviction (filled during a
// run), MISCONF after a failed save, against real redis-servers and kiqd processes. A refusal is
// not death: liveness keys are renewed where Redis allows it (PEXPIRE under OOM), orphan recovery
// waits a full liveness_ttl after writes work again (a key lapsed under MISCONF is a live
// process's), so no job runs twice; kiqd logs one line when refusals start and one when they end.
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "server/orphan_recovery.hpp"
#include "support/job_pushes.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/temp_dir.hpp"
#include "support/test_runtime.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using kiqd::test::KiqdProcess;
using kiqd::test::llen;
using kiqd::test::occurrences;
using kiqd::test::RedisServer;
using kiqd::test::TestRuntime;
using kiqd::test::wait_until;

namespace {

std::string ledger_job(const std::string& jid, double seconds) {
    return nlohmann::json{{"class", "Test::Ledger"}, {"args", {seconds}}, {"jid", jid},
                          {"queue", "default"},      {"retry", 3},        {"created_at", 1.7e9},
                          {"enqueued_at", 1.7e9}}
        .dump();
}

// jid -> runs, from a Test::Ledger file.
std::map<std::string, int> ledger_runs(const std::string& path) {
    std::map<std::string, int> runs;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) ++runs[nlohmann::json::parse(line)["jid"].get<std::string>()];
    return runs;
}

bool write_refused(redis::Connection& conn, const std::string& code) {
    const auto reply = conn.pipeline_unchecked({{"SET", "kiqd-test:probe", "1"}});
    return reply[0].is_error() && std::string(reply[0].error_text()).rfind(code, 0) == 0;
}

std::vector<std::string> alive_keys(redis::Connection& conn) {
    std::vector<std::string> out;
    const auto keys = conn.command({"KEYS", "kiqd:reliable:alive:*"});
    for (size_t i = 0; i < keys.size(); ++i) out.emplace_back(keys[i].str());
    return out;
}

// Two batched reliable-fetch processes on `server` running `jobs` Test::Ledger jobs of 100 ms;
// `refuse` makes Redis refuse writes once they are under way and returns when the refusal has
// lasted as the test wants; `allow` ends it. Checks every job ran exactly once and the log lines.
void run_through_refusal(RedisServer& server, const std::string& code,
                         const std::function<void(redis::Connection&)>& refuse,
                         const std::function<void(redis::Connection&)>& allow) {
    auto conn = server.connect();
    kiqd::test::TempDir dir("kiqd-ledger");
    const std::string ledger = dir.path() + "/ledger";
    constexpr int kJobs = 150;
    std::vector<std::string> jobs;
    for (int i = 0; i < kJobs; ++i) jobs.push_back(ledger_job("r" + std::to_string(i), 0.1));
    kiqd::test::push_raw(conn, "default", jobs);
    const std::string yaml = kiqd::test::kiqd_config(
        server,
        "concurrency: 2\nqueues: [default]\nfetch: reliable\n"
        "reliable_fetch: {batch_size: 50, liveness_ttl: 3, orphan_check_interval: 1}\n");
    const std::map<std::string, std::string> env{{"KIQD_TEST_LEDGER", ledger}};
    KiqdProcess a(KIQD_TEST_DAEMON, yaml, {}, env);
    KiqdProcess b(KIQD_TEST_DAEMON, yaml, {}, env);
    REQUIRE(wait_until([&] { return ledger_runs(ledger).size() >= 10; }, std::chrono::seconds(30)));
    refuse(conn);
    REQUIRE(write_refused(conn, code));
    REQUIRE(a.wait_for_output("Redis refuses writes", std::chrono::seconds(30)));
    REQUIRE(b.wait_for_output("Redis refuses writes", std::chrono::seconds(30)));
    allow(conn);
    REQUIRE(wait_until([&] { return !write_refused(conn, code); }));
    REQUIRE(wait_until(
        [&] { return ledger_runs(ledger).size() == kJobs && llen(conn, "queue:default") == 0; },
        std::chrono::seconds(120)));
    // A process says writes work again at its first accepted write that could grow Redis's
    // memory: a fetch, or else its next heartbeat. The jobs may all be done before that beat.
    CHECK(a.wait_for_output("Redis accepts writes again after", std::chrono::seconds(30)));
    CHECK(b.wait_for_output("Redis accepts writes again after", std::chrono::seconds(30)));
    CHECK(a.stop() == 0);
    CHECK(b.stop() == 0);
    size_t twice = 0;
    for (const auto& [jid, n] : ledger_runs(ledger)) twice += n > 1;
    std::printf("%s refusal: %d jobs, %zu ran more than once\n", code.c_str(), kJobs, twice);
    CHECK(twice == 0);
    for (const auto* p : {&a, &b}) {
        const auto out = p->output();
        INFO(out);
        CHECK(occurrences(out, "Redis refuses writes") == 1);
        CHECK(occurrences(out, "Redis accepts writes again after") == 1);
        CHECK(occurrences(out, "job(s) waiting in this process's queues") == 1);
        CHECK(occurrences(out, "Redis is unreachable") == 0);
        CHECK(occurrences(out, "Redis is back") == 0);
        CHECK(occurrences(out, "is gone; recovering") == 0);
    }
}

}  // namespace

TEST_CASE(
    "refusal daemon: Redis out of memory (maxmemory, noeviction) filled during a run for "
    "longer than liveness_ttl: liveness keys renewed, no job runs twice",
    "[refusal][reliable][daemon]") {
    RedisServer server({"--maxmemory-policy", "noeviction"});
    auto used_memory = [](redis::Connection& conn) {
        const auto info = std::string(conn.command({"INFO", "memory"}).str());
        const auto at = info.find("used_memory:") + 12;
        return std::stoll(info.substr(at, info.find('\r', at) - at));
    };
    run_through_refusal(
        server, "OOM",
        [&](redis::Connection& conn) {
            // Room for the run, then filled up by another client until Redis says no.
            conn.command({"CONFIG", "SET", "maxmemory",
                          std::to_string(used_memory(conn) + 4 * 1024 * 1024)});
            // Big values first, then smaller ones: a write is refused only once Redis is over
            // maxmemory, and a value that would cross it is refused while a smaller one fits.
            for (const size_t size : {64 * 1024, 4096, 256, 16})
                for (int i = 0; i < 2000; ++i)
                    if (conn.pipeline_unchecked({{"RPUSH", "filler", std::string(size, 'x')}})[0]
                            .is_error())
                        break;
            // Acknowledgements and shrinking client buffers free some memory: a margin keeps
            // Redis over maxmemory until the filler goes.
            conn.command(
                {"CONFIG", "SET", "maxmemory", std::to_string(used_memory(conn) - 1024 * 1024)});
            // The keys live on past liveness_ttl: PEXPIRE renews them under OOM.
            const auto keys = alive_keys(conn);
            REQUIRE(keys.size() == 2);
            const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(7);
            bool all_alive = true;
            wait_until(
                [&] {
                    for (const auto& k : keys)
                        all_alive = all_alive && conn.command({"EXISTS", k}).integer() == 1;
                    return std::chrono::steady_clock::now() > until;
                },
                std::chrono::seconds(20));
            CHECK(all_alive);
        },
        [&](redis::Connection& conn) {
            conn.command({"DEL", "filler"});
            conn.command({"CONFIG", "SET", "maxmemory", "0"});
        });
}

TEST_CASE(
    "refusal daemon: MISCONF after a failed save for longer than liveness_ttl: the lapsed "
    "liveness keys are not taken for death, no job runs twice",
    "[refusal][reliable][daemon]") {
    RedisServer server({"--save", "3600 1", "--enable-protected-configs", "yes"});
    run_through_refusal(
        server, "MISCONF",
        [&](redis::Connection& conn) {
            // A save that cannot write its file (the dir is /proc): with
            // stop-writes-on-bgsave-error (the default) every write is refused.
            conn.command({"CONFIG", "SET", "dir", "/proc"});
            conn.command({"BGSAVE"});
            REQUIRE(wait_until([&] { return write_refused(conn, "MISCONF"); }));
            // Nothing renews under MISCONF: both processes' keys lapse, as a dead one's would.
            REQUIRE(wait_until([&] { return alive_keys(conn).empty(); }, std::chrono::seconds(20)));
        },
        [&](redis::Connection& conn) {
            conn.command({"CONFIG", "SET", "dir", server.dir()});
            conn.command({"BGSAVE"});
        });
}

TEST_CASE(
    "orphan recovery waits a full liveness_ttl after writes work again, and while another "
    "process has recorded a refusal",
    "[refusal][reliable]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    TestRuntime t(server, {{"default", 0}}, 1, FetchMode::reliable, 1);
    t.config.reliable_fetch.liveness_ttl = std::chrono::seconds(3);
    const std::string orphans = "queue:sq|gonehost:7:0123456789ab|default";
    conn.command(
        {"LPUSH", orphans, kiqd::test::noop_payload("o1"), kiqd::test::noop_payload("o2")});
    conn.command({"SADD", "kiqd:reliable:working", orphans});
    OrphanRecovery recovery(t.rt, *t.reliable());

    // Recorded by another process that saw writes refused (its liveness round once they worked).
    conn.command({"SET", "kiqd:reliable:writes-refused", "otherhost:1:x", "PX", "60000"});
    CHECK_FALSE(recovery.recover_orphans(conn, false).ran);
    CHECK(llen(conn, orphans) == 2);
    conn.command({"DEL", "kiqd:reliable:writes-refused"});

    // Seen by this process: refused, then a write accepted again.
    t.health.failed(redis::ReplyError("MISCONF Redis is configured to save RDB snapshots"));
    CHECK(t.health.refusing());
    CHECK_FALSE(recovery.recover_orphans(conn, false).ran);
    t.health.wrote(RedisHealth::Clock::now(), RedisHealth::Write::any);  // an LREM: not enough
    CHECK(t.health.refusing());
    t.health.wrote(RedisHealth::Clock::now());
    CHECK_FALSE(t.health.refusing());
    CHECK_FALSE(recovery.recover_orphans(conn, false).ran);
    CHECK(llen(conn, orphans) == 2);
    // A liveness_ttl later the owner's key is still missing: it is dead.
    REQUIRE(wait_until([&] { return recovery.recover_orphans(conn, false).ran; }));
    CHECK(llen(conn, orphans) == 0);
    CHECK(llen(conn, "queue:default") == 2);
    const auto logs = t.logs();
    CHECK(occurrences(logs, "orphan recovery waits until writes have worked") >= 1);
    CHECK(occurrences(logs, "Redis refuses writes") == 1);
    CHECK(occurrences(logs, "Redis accepts writes again after") == 1);
}

TEST_CASE("liveness: the renewal goes through while Redis is out of memory",
          "[refusal][reliable]") {
    RedisServer server({"--maxmemory-policy", "noeviction"});
    auto conn = server.connect();
    TestRuntime t(server, {{"default", 0}}, 1, FetchMode::reliable, 50);
    t.config.reliable_fetch.liveness_ttl = std::chrono::seconds(30);
    OrphanRecovery recovery(t.rt, *t.reliable());
    recovery.register_alive(conn);
    const std::string alive = "kiqd:reliable:alive:" + std::string(TestRuntime::kIdentity);
    conn.command({"PEXPIRE", alive, "1000"});           // as if its last renewal was long ago
    conn.command({"CONFIG", "SET", "maxmemory", "1"});  // everything Redis holds is too much
    REQUIRE(write_refused(conn, "OOM"));
    recovery.register_alive(conn);  // PEXPIRE goes through; SADD and SET are refused
    CHECK(conn.command({"PTTL", alive}).integer() > 1000);
    CHECK(t.health.refusing());
    conn.command({"CONFIG", "SET", "maxmemory", "0"});
    recovery.register_alive(conn);
    CHECK_FALSE(t.health.refusing());
    // Once writes worked again it recorded the refusal for the fleet's recoveries.
    CHECK(conn.command({"EXISTS", "kiqd:reliable:writes-refused"}).integer() == 1);
}
