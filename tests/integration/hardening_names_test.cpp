// Hardening of what kiqd takes from its environment and its config, against real kiqd processes
// and a real Redis: hostile process names ($DYNO with '|', space, ':', newline, non-ASCII) run
// jobs, are not mistaken for other processes by a peer's orphan recovery or unique-lock reaper,
// and a kill -9'd one's job goes back to its own queue; the reaper keeps a live keeper's locks
// without a heartbeat record; durations at the bound are honoured (an exec timeout, a shutdown
// timeout) and beyond it stop the load with exit 78; relative plugin paths are found beside the
// config.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "middleware/unique/lock_keeper.hpp"
#include "server/orphan_recovery.hpp"
#include "server/process_identity.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/temp_dir.hpp"
#include "support/test_runtime.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using kiqd::test::file_exists;
using kiqd::test::held_lock_count;
using kiqd::test::held_locks;
using kiqd::test::KiqdProcess;
using kiqd::test::llen;
using kiqd::test::RedisServer;
using kiqd::test::TempDir;
using kiqd::test::TestRuntime;
using kiqd::test::wait_until;

namespace {

std::string job_json(const std::string& cls, const std::string& jid,
                     nlohmann::json args = nlohmann::json::array()) {
    return nlohmann::json{
        {"class", cls}, {"args", std::move(args)}, {"jid", jid},          {"queue", "default"},
        {"retry", 3},   {"created_at", 1.7e9},     {"enqueued_at", 1.7e9}}
        .dump();
}

std::string push_named(redis::Connection& conn, const std::string& cls, const std::string& jid,
                       nlohmann::json args = nlohmann::json::array()) {
    const std::string raw = job_json(cls, jid, std::move(args));
    conn.command({"SADD", "queues", "default"});
    conn.command({"LPUSH", "queue:default", raw});
    return raw;
}

// Notes that its job started, then runs until the file "go" exists or its parent (kiqd) is gone.
std::string waiting_script(const TempDir& dir) {
    return dir.script("wait.sh", "d='" + dir.path() +
                                     "'\n"
                                     ": > \"$d/started.$KIQD_JID\"\n"
                                     "while [ ! -e \"$d/go\" ] && kill -0 $PPID 2>/dev/null; do\n"
                                     "  sleep 0.02\n"
                                     "done\n");
}

// A config with `top` and one handler, class `cls`, running waiting_script with `options`.
std::string waiting_handler_config(const RedisServer& server, const TempDir& dir,
                                   const std::string& top, const std::string& cls,
                                   const std::string& options) {
    return kiqd::test::kiqd_config(server, top + "handlers:\n  " + cls + ":\n    exec: ['" +
                                               waiting_script(dir) + "']\n" + options);
}

}  // namespace

TEST_CASE(
    "process names: a hostile DYNO runs jobs, a peer neither recovers its running job nor "
    "reaps its lock, and after kill -9 its job goes back to its own queue",
    "[names][hardening][daemon]") {
    const std::string name = GENERATE(as<std::string>{}, "web|1", "web 1", "web:1", "web\n1",
                                      "w\xc3\xab"
                                      "b-\xc3\xbc");
    INFO("DYNO=" << name);
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    TempDir dir("kiqd-names");
    const std::string yaml =
        waiting_handler_config(server, dir,
                               "concurrency: 2\nqueues: [default]\nfetch: reliable\n"
                               "reliable_fetch: {liveness_ttl: 3, orphan_check_interval: 1}\n"
                               "unique_jobs: {reaper_interval: 1}\n",
                               "Test::Hold", "    lock: while_executing\n    lock_ttl: 600\n");
    push_named(conn, "Kiqd::Noop", "noop1");
    KiqdProcess victim(kiqd::test::binary_under_test(KIQD_BINARY), yaml, {}, {{"DYNO", name}});
    REQUIRE(victim.wait_for_output("jid=noop1 queue=default done"));

    // The identity carries the name encoded: no separator of a key name or a lock owner.
    std::string identity;
    REQUIRE(wait_until([&] {
        auto members = conn.command({"SMEMBERS", "processes"});
        if (members.size() != 1) return false;
        identity = std::string(members[0].str());
        return true;
    }));
    CHECK(identity.rfind(encode_host_name(name) + ":" + std::to_string(victim.pid()) + ":", 0) ==
          0);
    CHECK(identity.find_first_of("| \n") == std::string::npos);

    const std::string held = push_named(conn, "Test::Hold", "hold1", nlohmann::json::array({"k"}));
    REQUIRE(wait_until([&] { return file_exists(dir.file("started.hold1")); }));
    REQUIRE(wait_until([&] { return held_lock_count(conn) == 1; }));
    const auto owner = held_locks(conn).begin()->second;
    CHECK(LockKeeper::owner_identity(owner) == identity);
    const auto working = kiqd::test::only_member(conn, "kiqd:reliable:working");
    REQUIRE(working);
    CHECK(*working == "queue:sq|" + identity + "|default");

    // A peer, while the victim lives: nothing of it is orphaned, none of its locks reaped.
    TestRuntime peer(server, {{"default", 0}}, 1, FetchMode::reliable);
    OrphanRecovery recovery(peer.rt, *peer.reliable());
    CHECK(recovery.recover_orphans(conn, false).requeued == 0);
    CHECK(kiqd::test::lrange(conn, *working) == std::vector<std::string>{held});
    LockKeeper reaper(peer.keys, server.options(), std::chrono::seconds(1), TestRuntime::kIdentity,
                      *peer.log);
    CHECK(reaper.reap(conn, false) == 0);
    CHECK(held_lock_count(conn) == 1);
    CHECK(llen(conn, "queue:default") == 0);

    // kill -9: once its liveness key has expired, the peer puts the job back in `default`.
    victim.signal(SIGKILL);
    CHECK(victim.wait_exit() == 128 + SIGKILL);
    REQUIRE(wait_until([&] { return recovery.recover_orphans(conn, false).requeued == 1; },
                       std::chrono::seconds(20)));
    CHECK(kiqd::test::lrange(conn, "queue:default") == std::vector<std::string>{held});
    const auto queues = conn.command({"KEYS", "queue:*"});
    REQUIRE(queues.size() == 1);
    CHECK(std::string(queues[0].str()) == "queue:default");
}

TEST_CASE(
    "unique reaper: a live keeper's locks are kept without a heartbeat record, and freed once "
    "it stops",
    "[names][unique][hardening]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    TestRuntime t(server);
    const std::string live = "live:1:aaaaaaaaaaaa";
    LockKeeper keeper(t.keys, server.options(), std::chrono::seconds(60), live, *t.log);
    keeper.start();  // as the launcher does, before any processor (and before the first beat)
    const std::string owner = live + " 0123456789abcdef";
    conn.command({"SET", "uniquejobs:z:EXEC", owner});
    conn.command({"HSET", "kiqd:unique:held", "uniquejobs:z:EXEC", owner});
    CHECK(conn.command({"EXISTS", live}).integer() == 0);  // no heartbeat record yet

    LockKeeper reaper(t.keys, server.options(), std::chrono::seconds(1), TestRuntime::kIdentity,
                      *t.log);
    CHECK(reaper.reap(conn, false) == 0);
    CHECK(conn.command({"GET", "uniquejobs:z:EXEC"}).str() == owner);
    // Its heartbeat record expired (an outage of more than 60 s): still kept.
    conn.command({"DEL", live});
    CHECK(reaper.reap(conn, false) == 0);

    keeper.stop();  // a clean exit takes its liveness key with it
    CHECK(reaper.reap(conn, false) == 1);
    CHECK(conn.command({"EXISTS", "uniquejobs:z:EXEC"}).integer() == 0);
    CHECK(held_lock_count(conn) == 0);
}

TEST_CASE("durations: beyond 366 days stops the load with exit 78 naming the key and line",
          "[durations][hardening]") {
    auto& server = RedisServer::shared();
    const std::string base = kiqd::test::kiqd_config(server, "queues: [default]\n");
    {
        auto [code, out] = kiqd::test::check_config(KIQD_BINARY, base + "timeout: 9999999999\n");
        CHECK(code == 78);
        CHECK_THAT(out, Catch::Contains("timeout (line ") &&
                            Catch::Contains("must be at most 31622400 seconds (366 days)"));
    }
    {
        auto [code, out] = kiqd::test::check_config(KIQD_BINARY, base +
                                                                     "handlers:\n"
                                                                     "  A:\n"
                                                                     "    exec: [/bin/true]\n"
                                                                     "    timeout: 9999999999\n");
        CHECK(code == 78);
        CHECK_THAT(out, Catch::Contains("handlers.A.timeout (line ") &&
                            Catch::Contains("must be at most 31622400 seconds (366 days)"));
    }
    {
        auto [code, out] = kiqd::test::check_config(KIQD_BINARY, base, {"-t", "9999999999"});
        CHECK(code == 78);
        CHECK_THAT(out, Catch::Contains("-t: must be at most 31622400 seconds (366 days)"));
    }
}

TEST_CASE(
    "durations: an exec job with the longest timeout runs to its end, and a shutdown with the "
    "longest timeout waits for it",
    "[durations][hardening][daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    TempDir dir("kiqd-durations");
    const std::string yaml = waiting_handler_config(
        server, dir, "concurrency: 2\nqueues: [default]\ntimeout: 31622400\n", "Test::Long",
        "    timeout: 31622400\n");
    KiqdProcess kiqd(kiqd::test::binary_under_test(KIQD_BINARY), yaml);

    // Not timed out early: the job ends when the test lets it, successfully.
    push_named(conn, "Test::Long", "long1");
    REQUIRE(wait_until([&] { return file_exists(dir.file("started.long1")); }));
    dir.write("go", "");
    REQUIRE(kiqd.wait_for_output("jid=long1 queue=default done"));
    ::unlink(dir.file("go").c_str());

    // The shutdown waits: the running job is not interrupted or pushed back; it finishes when
    // let go, and the process then exits cleanly.
    push_named(conn, "Test::Long", "long2");
    REQUIRE(wait_until([&] { return file_exists(dir.file("started.long2")); }));
    kiqd.signal(SIGTERM);
    REQUIRE(kiqd.wait_for_output("waiting up to 31622400.0 s for running jobs"));
    REQUIRE(kiqd.running());
    dir.write("go", "");
    CHECK(kiqd.wait_exit() == 0);
    const std::string out = kiqd.output();
    CHECK_THAT(out, Catch::Contains("jid=long2 queue=default done"));
    CHECK_THAT(out, !Catch::Contains("interrupted") && !Catch::Contains("timed out"));
    CHECK(llen(conn, "queue:default") == 0);
    CHECK(kiqd::test::zcard(conn, "retry") == 0);
}

TEST_CASE("plugins: a relative path is found beside the config file, not in the working directory",
          "[plugin][hardening]") {
    TempDir dir("kiqd-plugin-path");
    std::filesystem::create_directories(dir.file("lib"));
    std::filesystem::copy_file(KIQD_EXAMPLE_PLUGIN, dir.file("lib/libjobs.so"));
    auto& server = RedisServer::shared();
    const std::string config = dir.write(
        "kiqd.yml",
        kiqd::test::kiqd_config(server, "queues: [default]\nplugins: [lib/libjobs.so]\n"));
    // The test runs in the build directory, where lib/libjobs.so does not exist.
    REQUIRE_FALSE(file_exists("lib/libjobs.so"));
    auto [code, out] = kiqd::test::run_command({KIQD_BINARY, "check-config", "-C", config});
    CHECK(code == 0);
    CHECK_THAT(out, Catch::Contains("1 plugin(s)"));
}
