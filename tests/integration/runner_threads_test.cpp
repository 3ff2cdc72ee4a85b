// Runner processes that run several jobs at once (the protocol's tagged dialect), with the real
// kiqd binary, the real kiqd-ruby-runner and the application in tests/runners/ruby_app: the
// default keeps `concurrency` jobs in flight over `processes`; a timeout fails its job and
// requeues the others on that process; a crash fails every job the process held; shutdown
// requeues; recycling drains; the processes get the app's environment (REDIS_URL, `env:`); a
// selector key routes classes by their resource boundary. Also run on Sidekiq 7.3 and 8.1 (ctest's
// runner_sidekiq73 and runner_sidekiq81, inside the test worlds of scripts/world), where two more
// cases run: sidekiq_retry_in's :kill and an iterable job.
#include <fmt/format.h>
#include <signal.h>

#include <catch2/catch.hpp>

#include "integration/runner_app.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using namespace kiqd::test::runner_app;
using kiqd::test::KiqdProcess;
using kiqd::test::lrange;
using kiqd::test::RedisServer;
using kiqd::test::wait_until;
using kiqd::test::zrange;

namespace {

// kiqd with one runner pool `ruby`: `processes` processes, `concurrency` processor threads, and
// the pool's threads left to their default (ceil(concurrency / processes)) unless `extra` says.
std::string pool_config(const RedisServer& server, int concurrency, int processes,
                        const std::string& runner_extra = "", const std::string& handlers = "",
                        const std::string& top = "timeout: 10\n") {
    return kiqd::test::default_queue_config(
        server,
        fmt::format("concurrency: {}\n{}runners:\n  ruby:\n    command: [\"{}\", "
                    "\"{}\", \"--require\", \"{}/app.rb\"]\n    processes: {}\n{}"
                    "handlers:\n  \"*\": {{runner: ruby}}\n{}",
                    concurrency, top, ruby(), kRunner, kApp, processes, runner_extra, handlers));
}

std::vector<std::string> keys(const std::string& prefix, int n) {
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) out.push_back(prefix + std::to_string(i));
    return out;
}

std::vector<std::string> gate_jobs(const RedisServer& server, const std::vector<std::string>& ks) {
    JobList jobs;
    for (const auto& k : ks) jobs.push_back({"GateJob", k});
    return enqueue(server, jobs);
}

void open_gates(redis::Connection& conn, const std::vector<std::string>& ks) {
    for (const auto& k : ks) conn.command({"RPUSH", "app:gate:" + k, "go"});
}

std::set<std::string> column(const std::vector<nlohmann::json>& rows, size_t index) {
    std::set<std::string> out;
    for (const auto& r : rows) out.insert(r[index].dump());
    return out;
}

}  // namespace

TEST_CASE(
    "runner threads: one process runs several jobs at once; the default keeps "
    "concurrency in flight",
    "[runner][threads]") {
    RUBY_CASE_BEGIN();
    // concurrency 6 over 2 processes: 3 jobs at once each, without a `threads:` key.
    KiqdProcess kiqd(KIQD_BINARY, pool_config(server, 6, 2), {}, app_env(server));
    const auto ks = keys("g", 6);
    gate_jobs(server, ks);
    // All six start while none can finish: six jobs in flight on two processes.
    require_records(conn, "started", 6);
    const auto started = records(conn, "started");
    CHECK(records(conn, "finished").empty());
    CHECK(pids_of(started, 1).size() == 2);
    std::set<std::pair<long long, long long>> threads;  // (pid, thread): forked ids may repeat
    for (const auto& r : started) threads.insert({r[1].get<long long>(), r[2].get<long long>()});
    CHECK(threads.size() == 6);
    // kiqd-ruby-runner asks for a socket per seat: each job went over its own.
    CHECK(kiqd.wait_for_output("3 job(s) at once, a socket each"));
    open_gates(conn, ks);
    require_records(conn, "finished", 6);
    CHECK(column(records(conn, "finished"), 0).size() == 6);  // each finished once
    CHECK(kiqd.stop() == 0);
    CHECK(zrange(conn, "retry").empty());
}

TEST_CASE(
    "runner threads: a timeout fails its job; the others on its process are requeued, "
    "never failed",
    "[runner][threads]") {
    RUBY_CASE_BEGIN();
    // One process, three jobs at once: a hang that times out after 1 s and two gated jobs.
    KiqdProcess kiqd(KIQD_BINARY,
                     pool_config(server, 3, 1, "", "  TroubleJob: {runner: ruby, timeout: 1}\n"),
                     {}, app_env(server));
    const auto ks = keys("t", 2);
    const auto gated = gate_jobs(server, ks);
    require_records(conn, "started", 2);
    const auto hang = enqueue(server, {{"TroubleJob", "hang"}});
    // The hang fails with Kiqd::Timeout; the process takes no new job, its two gated jobs get
    // the grace, then the process is stopped and they go back to their queue.
    REQUIRE(
        wait_until([&] { return zrange(conn, "retry").size() == 1; }, std::chrono::seconds(60)));
    const auto failed = nlohmann::json::parse(zrange(conn, "retry")[0]);
    CHECK(failed["jid"] == hang[0]);
    CHECK(failed["error_class"] == "Kiqd::Timeout");
    REQUIRE(kiqd.wait_for_output("another job on it timed out", std::chrono::seconds(30)));
    // A new process runs them again: they start twice (the first run was cut), finish once.
    REQUIRE(
        wait_until([&] { return records(conn, "started").size() == 5; }, std::chrono::seconds(60)));
    open_gates(conn, ks);
    require_records(conn, "finished", 2);
    CHECK(column(records(conn, "finished"), 2) ==
          std::set<std::string>{nlohmann::json(gated[0]).dump(), nlohmann::json(gated[1]).dump()});
    CHECK(zrange(conn, "retry").size() == 1);  // only the hang
    CHECK(zrange(conn, "dead").empty());
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("runner threads: a process that crashes fails every job it held; the others go on",
          "[runner][threads]") {
    RUBY_CASE_BEGIN();
    KiqdProcess kiqd(KIQD_BINARY, pool_config(server, 3, 1), {}, app_env(server));
    const auto ks = keys("c", 2);
    const auto gated = gate_jobs(server, ks);
    require_records(conn, "started", 2);
    const auto crash = enqueue(server, {{"TroubleJob", "exit"}});
    REQUIRE(
        wait_until([&] { return zrange(conn, "retry").size() == 3; }, std::chrono::seconds(60)));
    std::set<std::string> failed;
    for (const auto& s : zrange(conn, "retry")) {
        const auto j = nlohmann::json::parse(s);
        CHECK(j["error_class"] == "Kiqd::RunnerCrashed");
        failed.insert(j["jid"].get<std::string>());
    }
    CHECK(failed == std::set<std::string>{gated[0], gated[1], crash[0]});
    // A new process takes new jobs.
    enqueue(server, {{"PlainJob", 1, 2}});
    require_records(conn, "done", 1);
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("runner threads: SIGTERM past the deadline requeues every job a process held",
          "[runner][threads]") {
    RUBY_CASE_BEGIN();
    const auto ks = keys("s", 3);
    {
        KiqdProcess kiqd(KIQD_BINARY, pool_config(server, 3, 1, "", "", "timeout: 1\n"), {},
                         app_env(server));
        gate_jobs(server, ks);
        require_records(conn, "started", 3);
        CHECK(kiqd.stop() == 0);
        for (auto pid : pids_of(records(conn, "started"), 1))
            CHECK(wait_until([&] { return ::kill(static_cast<pid_t>(pid), 0) != 0; }));
    }
    CHECK(records(conn, "finished").empty());
    CHECK(lrange(conn, "queue:default").size() == 3);
    CHECK(zrange(conn, "retry").empty());
}

TEST_CASE("runner threads: recycling drains a process, never kills it with jobs in flight",
          "[runner][threads]") {
    RUBY_CASE_BEGIN();
    // Three at once, recycled after 4 jobs: the fourth job's process finishes what it holds.
    KiqdProcess kiqd(KIQD_BINARY, pool_config(server, 3, 1, "    max_jobs: 4\n"), {},
                     app_env(server));
    JobList jobs;
    for (int i = 0; i < 12; ++i) jobs.push_back({"PlainJob", i, "r"});
    const auto jids = enqueue(server, jobs);
    require_records(conn, "done", 12, std::chrono::seconds(90));
    CHECK(column(records(conn, "done"), 1).size() == 12);
    CHECK(pids_of(records(conn, "done"), 5).size() >= 3);
    CHECK(kiqd.wait_for_output("recycled after 4 job(s): max_jobs 4"));
    CHECK(zrange(conn, "retry").empty());
    CHECK(kiqd.output().find("RunnerCrashed") == std::string::npos);
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("runner threads: the processes get the app's environment; exec commands do not",
          "[runner][threads][env]") {
    RUBY_CASE_BEGIN();
    // REDIS_URL in kiqd's environment: the app gets it, an exec command does not.
    auto env = app_env(server);
    env["REDIS_URL"] = server.url();
    KiqdProcess kiqd(KIQD_BINARY,
                     pool_config(server, 2, 1, "    env: {APP_FLAG: \"on\"}\n",
                                 "  Kiqd::Env: {exec: [\"/bin/sh\", \"-c\", \"echo "
                                 "url=${REDIS_URL:-none} >&2\"]}\n"),
                     {}, env);
    enqueue(server, {{"EnvJob"}});
    require_records(conn, "env", 1);
    const auto seen = records(conn, "env")[0];
    CHECK(seen["redis_url"] == server.url());  // the app's Sidekiq client can enqueue
    CHECK(seen["app_flag"] == "on");
    CHECK(seen["runner"] == "ruby");
    CHECK(seen["threads"] == "2");
    CHECK(seen["notify"].is_null());
    conn.command({"LPUSH", "queue:default", R"({"class":"Kiqd::Env","args":[],"jid":"e1"})"});
    CHECK(kiqd.wait_for_output("url=none"));
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("runner threads: a selector key sends CPU-bound classes to their own pool",
          "[runner][threads][selector]") {
    RUBY_CASE_BEGIN();
    const std::string yaml = kiqd::test::default_queue_config(
        server,
        fmt::format("concurrency: 4\ntimeout: 10\nrunners:\n"
                    "  app:\n    command: [\"{2}\", \"{0}\", \"--require\", "
                    "\"{1}/app.rb\"]\n    processes: 1\n"
                    "  cpu:\n    command: [\"{2}\", \"{0}\", \"--require\", "
                    "\"{1}/app.rb\"]\n    processes: 1\n    threads: 1\n"
                    "handlers:\n  CpuJob: {{resource_boundary: cpu}}\n"
                    "  \"resource_boundary=cpu\": {{runner: cpu}}\n  \"*\": {{runner: app}}\n",
                    kRunner, kApp, ruby()));
    KiqdProcess kiqd(KIQD_BINARY, yaml, {}, app_env(server));
    enqueue(server, {{"CpuJob", 1}, {"CpuJob", 2}, {"EnvJob"}});
    require_records(conn, "cpu", 2);
    require_records(conn, "env", 1);
    for (const auto& r : records(conn, "cpu")) CHECK(r[1] == "cpu");
    CHECK(records(conn, "env")[0]["runner"] == "app");
    CHECK(kiqd.stop() == 0);

    // A selector that does not parse is a config error naming the key.
    auto [status, out] = kiqd::test::check_config(
        KIQD_BINARY,
        kiqd::test::default_queue_config(server,
                                         "runners:\n  app: {command: [\"/bin/true\"]}\nhandlers:\n"
                                         "  \"resource_boundary=gpu\": {runner: app}\n"));
    CHECK(status == 78);
    CHECK(out.find("handlers.resource_boundary=gpu") != std::string::npos);
}

TEST_CASE("runner threads: Sidekiq 7's sidekiq_retry_in :kill sends the job to the dead set",
          "[runner][threads][sidekiq7]") {
    RUBY_CASE_BEGIN();
    if (sidekiq_major() < 7) {
        WARN(
            "skipped: :kill is Sidekiq 7's and 8's (ctest's runner_sidekiq73 and "
            "runner_sidekiq81)");
        return;
    }
    KiqdProcess kiqd(KIQD_BINARY, pool_config(server, 2, 1), {}, app_env(server));
    const auto jids = enqueue(server, {{"KillJob"}});
    REQUIRE(wait_until([&] { return zrange(conn, "dead").size() == 1; }, std::chrono::seconds(60)));
    CHECK(zrange(conn, "retry").empty());
    require_records(conn, "exhausted", 1);
    CHECK(records(conn, "exhausted")[0][0] == jids[0]);
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("runner threads: quiet makes an iterable job save its cursor; the next run resumes",
          "[runner][threads][sidekiq7]") {
    RUBY_CASE_BEGIN();
    if (sidekiq_major() < 7) {
        WARN(
            "skipped: iterable jobs are Sidekiq 7.3's and 8's (ctest's runner_sidekiq73 and "
            "runner_sidekiq81)");
        return;
    }
    const int n = 200;  // 50 ms each: it is still running when the quiet comes
    std::string jid;
    {
        KiqdProcess kiqd(KIQD_BINARY, pool_config(server, 2, 1), {}, app_env(server));
        jid = enqueue(server, {{"CountJob", n}})[0];
        REQUIRE(wait_until([&] { return records(conn, "iteration").size() >= 5; }));
        kiqd.signal(SIGTSTP);
        // It stops at its next iteration and pushes itself back to its queue.
        REQUIRE(wait_until([&] { return lrange(conn, "queue:default").size() == 1; },
                           std::chrono::seconds(30)));
        CHECK(kiqd.stop() == 0);
    }
    const size_t before = records(conn, "iteration").size();
    CHECK(before < static_cast<size_t>(n));
    CHECK(zrange(conn, "retry").empty());
    KiqdProcess again(KIQD_BINARY, pool_config(server, 2, 1), {}, app_env(server));
    require_records(conn, "iteration", n, std::chrono::seconds(60));
    // Every index ran exactly once, across the two runs, by two processes.
    std::set<long long> indexes;
    for (const auto& r : records(conn, "iteration")) {
        CHECK(r[0] == jid);
        indexes.insert(r[1].get<long long>());
    }
    CHECK(indexes.size() == static_cast<size_t>(n));
    CHECK(pids_of(records(conn, "iteration"), 2).size() == 2);
    CHECK(again.stop() == 0);
}
