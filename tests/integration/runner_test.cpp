// Persistent runners (`runners:` and `handlers: … runner:`) in the real kiqd binary with the real
// kiqd-ruby-runner and Debian's Sidekiq 6.4.1 (ctest's `integration`), or the Sidekiq and Rails of
// a test world (ctest's runner_sidekiq73 and runner_sidekiq81 run the cases that depend on the
// application's Sidekiq inside scripts/world): a small application (tests/runners/ruby_app)
// enqueues with perform_async/perform_later; kiqd runs its jobs through the runner with the
// application's server middleware; failures carry the Ruby backtrace Sidekiq's API shows,
// sidekiq_retry_in's delay, and sidekiq_retries_exhausted/death handlers; crashes, hangs,
// garbage replies, boot failures, recycling, quiet and SIGTERM lose no job and run none twice.
#include <fmt/format.h>
#include <signal.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "integration/runner_app.hpp"
#include "support/http_get.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/temp_dir.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using namespace kiqd::test::runner_app;
using kiqd::test::KiqdProcess;
using kiqd::test::lrange;
using kiqd::test::RedisServer;
using kiqd::test::run_command;
using kiqd::test::TempDir;
using kiqd::test::wait_until;
using kiqd::test::zrange;
namespace fs = std::filesystem;

TEST_CASE("runner: the app's Sidekiq and ActiveJob jobs run with its server middleware",
          "[runner]") {
    RUBY_CASE_BEGIN();
    KiqdProcess kiqd(KIQD_BINARY, runner_config(server), {}, app_env(server));
    const auto jids = enqueue(server, {{"PlainJob", 1, "two"}, {"GreetJob", "Ada"}});
    require_records(conn, "done", 2);
    auto done = records(conn, "done");
    std::sort(done.begin(), done.end(), [](auto& a, auto& b) { return a[0] < b[0]; });
    CHECK(done[0][0] == "GreetJob");
    CHECK(done[0][2] == "Ada");
    CHECK(done[0][3] == jids[1]);  // provider_job_id: the Sidekiq jid, set by the adapter
    CHECK(done[1][0] == "PlainJob");
    CHECK(done[1][1] == jids[0]);  // jid set on the worker
    CHECK(done[1][2] == 1);
    CHECK(done[1][3] == "two");
    CHECK(done[1][4] == "tagged");  // the app's server middleware wrapped perform
    const auto mw = records(conn, "middleware");
    REQUIRE(mw.size() == 2);
    std::set<std::string> classes{mw[0][0], mw[1][0]};
    // The ActiveJob job runs in the adapter's wrapper: ...SidekiqAdapter::JobWrapper (Rails 6.1's
    // adapter, and Sidekiq 7.3's subclass of the same name), Sidekiq::ActiveJob::Wrapper under
    // Sidekiq 8's adapter (its JobWrapper is only another name for it).
    const std::string wrapper = sidekiq_major() >= 8
                                    ? "Sidekiq::ActiveJob::Wrapper"
                                    : "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper";
    CHECK(classes == std::set<std::string>{"PlainJob", wrapper});
    // The job's stdout is in kiqd's log with its class and jid.
    CHECK(kiqd.wait_for_output("class=PlainJob jid=" + jids[0]));
    CHECK(kiqd.wait_for_output("stdout: plain job 1 two"));
    // The runner processes run on the application's Ruby and Sidekiq (the world's, in a world).
    CHECK(kiqd.wait_for_output(", sidekiq " + sidekiq_version() + "))"));
    CHECK(kiqd.stop() == 0);
}

TEST_CASE(
    "runner: a failure has its Ruby backtrace, sidekiq_retry_in's delay, and "
    "retries_exhausted with death handlers",
    "[runner]") {
    RUBY_CASE_BEGIN();
    KiqdProcess kiqd(KIQD_BINARY, runner_config(server), {}, app_env(server));
    const double before = static_cast<double>(std::time(nullptr));
    const auto jids = enqueue(server, {{"FailingJob", 7}, {"ExhaustedJob"}});
    REQUIRE(
        wait_until([&] { return zrange(conn, "retry").size() == 1; }, std::chrono::seconds(60)));
    require_records(conn, "deaths", 1, std::chrono::seconds(10));
    const auto api = sidekiq_api(server);
    REQUIRE(api["retry"].size() == 1);
    const auto& r = api["retry"][0];
    CHECK(r["jid"] == jids[0]);
    CHECK(r["error_class"] == "ArgumentError");
    CHECK(r["error_message"] == "bad input 7");
    // The real Ruby backtrace, as Sidekiq's API (and so the Web UI) decodes it.
    const std::string top = r["error_backtrace"][0];
    CHECK(top.find("app.rb") != std::string::npos);
    CHECK(top.find("check_input") != std::string::npos);
    // sidekiq_retry_in { |count| 1000 * (count + 1) } with count 0: 1000 s plus at most 9 s.
    CHECK(r["at"].get<double>() >= before + 1000);
    CHECK(r["at"].get<double>() <= static_cast<double>(std::time(nullptr)) + 1010);
    // ExhaustedJob (retry: 0): dead set, its sidekiq_retries_exhausted, the death handler.
    REQUIRE(api["dead"].size() == 1);
    CHECK(api["dead"][0]["jid"] == jids[1]);
    require_records(conn, "exhausted", 1, std::chrono::seconds(10));
    const auto ex = records(conn, "exhausted")[0];
    CHECK(ex[0] == jids[1]);
    CHECK(ex[1] == "IOError");
    CHECK(ex[2] == "IOError");
    CHECK(ex[3] == "disk gone");
    const auto death = records(conn, "deaths")[0];
    CHECK(death[0] == "ExhaustedJob");
    CHECK(death[2] == "IOError");
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("runner: a child that dies, writes garbage or hangs fails only its job", "[runner]") {
    RUBY_CASE_BEGIN();
    const int port = kiqd::test::free_port();
    KiqdProcess kiqd(
        KIQD_BINARY,
        runner_config(server, "",
                      "  TroubleJob: {runner: ruby, timeout: 2}\nmetrics: {listen: \"127.0.0.1:" +
                          std::to_string(port) + "\"}\n"),
        {}, app_env(server));
    const auto jids = enqueue(server, {{"TroubleJob", "exit"},
                                       {"TroubleJob", "kill"},
                                       {"TroubleJob", "garbage"},
                                       {"TroubleJob", "hang"},
                                       {"PlainJob", 1, 2}});
    REQUIRE(
        wait_until([&] { return zrange(conn, "retry").size() == 4; }, std::chrono::seconds(90)));
    require_records(conn, "done", 1, std::chrono::seconds(10));
    std::map<std::string, nlohmann::json> by_jid;
    for (const auto& s : zrange(conn, "retry")) {
        auto j = nlohmann::json::parse(s);
        by_jid[j["jid"]] = j;
    }
    CHECK(by_jid[jids[0]]["error_class"] == "Kiqd::RunnerCrashed");
    CHECK(by_jid[jids[0]]["error_message"].get<std::string>().find("exited with status 3") !=
          std::string::npos);
    CHECK(by_jid[jids[1]]["error_class"] == "Kiqd::RunnerCrashed");
    CHECK(by_jid[jids[1]]["error_message"].get<std::string>().find("SIGKILL") != std::string::npos);
    CHECK(by_jid[jids[2]]["error_class"] == "Kiqd::RunnerCrashed");
    CHECK(by_jid[jids[2]]["error_message"].get<std::string>().find("without a type line") !=
          std::string::npos);
    CHECK(by_jid[jids[3]]["error_class"] == "Kiqd::Timeout");
    // The hang is the one runner timeout on /metrics.
    const auto [code, metrics] = kiqd::test::http_get(port, "/metrics");
    CHECK(code == 200);
    CHECK(metrics.find("\nkiqd_runner_timeouts_total 1\n") != std::string::npos);
    // Each misbehaving child was replaced: later jobs still run.
    enqueue(server, {{"PlainJob", 3, 4}});
    require_records(conn, "done", 2);
    CHECK(records(conn, "started").size() == 4);  // each ran exactly once
    CHECK(kiqd.stop() == 0);
}

TEST_CASE(
    "runner: a command that cannot boot is reported once, retried, and check-config says "
    "so",
    "[runner]") {
    RUBY_CASE_BEGIN();
    TempDir dir;
    const std::string broken = dir.file("broken.rb");
    {
        std::ofstream f(broken);
        f << "File.open(ENV.fetch('BOOT_LOG'), 'a') { |l| l.puts Process.pid }\n"
             "warn 'cannot find config/database.yml'\nraise LoadError, 'boom at boot'\n";
    }
    const std::string yaml = kiqd::test::default_queue_config(
        server, "timeout: 1\nrunners:\n  bad:\n    command: [\"" + ruby() + "\", \"" + kRunner +
                    "\", \"--require\", \"" + broken +
                    "\"]\n    processes: 1\nhandlers:\n  \"*\": {runner: bad}\n");
    const std::string boot_log = dir.file("boots.log");
    ::setenv("BOOT_LOG", boot_log.c_str(), 1);  // check-config's runner reads it too
    auto [status, out] = kiqd::test::check_config(KIQD_BINARY, yaml);
    CHECK(status == 78);
    CHECK(out.find("runners.bad (line") != std::string::npos);
    CHECK(out.find("cannot find config/database.yml") != std::string::npos);

    fs::remove(boot_log);
    KiqdProcess kiqd(KIQD_BINARY, yaml, {}, app_env(server));
    enqueue(server, {{"PlainJob", 1, 2}});
    REQUIRE(kiqd.wait_for_output("runner=bad did not boot", std::chrono::seconds(30)));
    CHECK(kiqd.wait_for_output("boom at boot"));
    // Retried with backoff (1 s, then 2 s): after the third start, still one report.
    auto boots = [&] { return kiqd::test::occurrences(kiqd::test::read_file(boot_log), "\n"); };
    REQUIRE(wait_until([&] { return boots() >= 3; }, std::chrono::seconds(30)));
    CHECK(kiqd.stop() == 0);
    ::unsetenv("BOOT_LOG");
    CHECK(kiqd::test::occurrences(kiqd.output(), "did not boot") == 1);
    // The job never ran and was not lost: it is back in its queue.
    CHECK(lrange(conn, "queue:default").size() == 1);
}

TEST_CASE("runner: children are recycled after max_jobs and above max_rss_mb", "[runner]") {
    RUBY_CASE_BEGIN();
    SECTION("max_jobs") {
        KiqdProcess kiqd(KIQD_BINARY, one_at_a_time(runner_config(server, "    max_jobs: 2\n")), {},
                         app_env(server));
        JobList jobs;
        for (int i = 0; i < 6; ++i) jobs.push_back({"PlainJob", i, "x"});
        enqueue(server, jobs);
        require_records(conn, "done", 6, std::chrono::seconds(90));
        // One job at a time, two per child: at least three children ran them.
        CHECK(pids_of(records(conn, "done"), 5).size() >= 3);
        CHECK(kiqd.wait_for_output("recycled after 2 job(s): max_jobs 2"));
        CHECK(kiqd.stop() == 0);
    }
    SECTION("max_rss_mb") {
        KiqdProcess kiqd(KIQD_BINARY, one_at_a_time(runner_config(server, "    max_rss_mb: 150\n")),
                         {}, app_env(server));
        enqueue(server, {{"GrowJob", 200}, {"GrowJob", 1}});
        if (!wait_until([&] { return records(conn, "done").size() == 2; },
                        std::chrono::seconds(90)))
            FAIL(kiqd.output() << "\nqueue: " << lrange(conn, "queue:default").size()
                               << " retry: " << zrange(conn, "retry").size()
                               << " dead: " << zrange(conn, "dead").size()
                               << " done: " << records(conn, "done").size());
        CHECK(kiqd.wait_for_output("above max_rss_mb 150"));
        const auto done = records(conn, "done");
        CHECK(done[0][2] != done[1][2]);  // the second ran in a new child
        CHECK(kiqd.stop() == 0);
    }
}

TEST_CASE("runner: SIGTERM with jobs mid-run requeues them once their children are gone",
          "[runner]") {
    RUBY_CASE_BEGIN();
    // timeout 1: the shutdown deadline passes while both 3 s jobs run.
    auto yaml = runner_config(server);
    yaml.replace(yaml.find("timeout: 10"), 11, "timeout: 1");
    std::vector<std::string> jids;
    {
        KiqdProcess kiqd(KIQD_BINARY, yaml, {}, app_env(server));
        jids = enqueue(server, {{"TroubleJob", "slow", "a"}, {"TroubleJob", "slow", "b"}});
        require_records(conn, "started", 2);
        CHECK(kiqd.stop() == 0);
        CHECK(kiqd.output().find("stopped by shutdown") != std::string::npos);
        // Every child is gone with kiqd.
        for (auto pid : pids_of(records(conn, "started"), 2))
            CHECK(::kill(static_cast<pid_t>(pid), 0) != 0);
    }
    CHECK(records(conn, "finished").empty());
    const auto queued = lrange(conn, "queue:default");
    CHECK(queued.size() == 2);
    CHECK(zrange(conn, "retry").empty());
    // A new kiqd runs them to the end, each once.
    KiqdProcess again(KIQD_BINARY, runner_config(server), {}, app_env(server));
    require_records(conn, "finished", 2);
    CHECK(again.stop() == 0);
    CHECK(records(conn, "started").size() == 4);
    CHECK(lrange(conn, "queue:default").empty());
}

TEST_CASE("runner: threads waiting for a busy child get it in turn, or give up at shutdown",
          "[runner]") {
    RUBY_CASE_BEGIN();
    // One process that takes one job at a time, four threads: three wait in acquire while one
    // job runs, and each freed child is handed to the next waiter with its job already sent.
    auto yaml = runner_config(server, "    threads: 1\n");
    yaml.replace(yaml.find("concurrency: 2"), 14, "concurrency: 4");
    yaml.replace(yaml.find("processes: 2"), 12, "processes: 1");
    SECTION("every job runs once, on the one child") {
        KiqdProcess kiqd(KIQD_BINARY, yaml, {}, app_env(server));
        JobList jobs;
        for (int i = 0; i < 40; ++i) jobs.push_back({"PlainJob", i, "w"});
        const auto jids = enqueue(server, jobs);
        require_records(conn, "done", 40);
        const auto done = records(conn, "done");
        std::set<std::string> ran;
        for (const auto& d : done) ran.insert(d[1].get<std::string>());
        CHECK(ran == std::set<std::string>(jids.begin(), jids.end()));
        CHECK(pids_of(done, 5).size() == 1);
        CHECK(kiqd.output().find("while idle") == std::string::npos);
        CHECK(kiqd.stop() == 0);
    }
    SECTION("SIGTERM: the running job and the waiting ones go back to the queue") {
        yaml.replace(yaml.find("timeout: 10"), 11, "timeout: 1");
        {
            KiqdProcess kiqd(KIQD_BINARY, yaml, {}, app_env(server));
            enqueue(server, {{"TroubleJob", "slow", "a"},
                             {"TroubleJob", "slow", "b"},
                             {"TroubleJob", "slow", "c"}});
            require_records(conn, "started", 1);
            // The other two were fetched and wait for the child.
            REQUIRE(wait_until([&] { return lrange(conn, "queue:default").empty(); }));
            CHECK(kiqd.stop() == 0);
        }
        CHECK(records(conn, "started").size() == 1);
        CHECK(lrange(conn, "queue:default").size() == 3);
        CHECK(zrange(conn, "retry").empty());
    }
}

TEST_CASE("runner: quiet sends no new job; running jobs finish", "[runner]") {
    RUBY_CASE_BEGIN();
    KiqdProcess kiqd(KIQD_BINARY, runner_config(server), {}, app_env(server));
    enqueue(server, {{"TroubleJob", "slow", "a"}});
    require_records(conn, "started", 1);
    kiqd.signal(SIGTSTP);
    REQUIRE(kiqd.wait_for_output("quiet", std::chrono::seconds(10)));
    enqueue(server, {{"PlainJob", 1, 2}});
    require_records(conn, "finished", 1, std::chrono::seconds(30));
    CHECK(records(conn, "done").empty());
    CHECK(lrange(conn, "queue:default").size() == 1);
    CHECK(kiqd.stop() == 0);
}

namespace {

// Alive and not a zombie (kiqd's orphans are reaped by whatever init the machine has).
bool alive(long long pid) {
    const std::string stat = kiqd::test::read_file("/proc/" + std::to_string(pid) + "/stat");
    const auto close = stat.rfind(')');
    return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

size_t lines_in(const std::string& path) {
    return fs::exists(path) ? kiqd::test::occurrences(kiqd::test::read_file(path), "\n") : 0;
}

// The application's environment with BOOT_LOG: a line per boot of the application, in `dir`.
std::map<std::string, std::string> boot_logged_env(const RedisServer& server, const TempDir& dir) {
    auto env = app_env(server);
    env["BOOT_LOG"] = dir.file("boots.log");
    return env;
}

// Two 3 s jobs, running at once on two processes: their `started` records (mode, key, pid, ppid).
std::vector<nlohmann::json> two_jobs_at_once(const RedisServer& server, redis::Connection& conn) {
    enqueue(server, {{"TroubleJob", "slow", "a"}, {"TroubleJob", "slow", "b"}});
    require_records(conn, "started", 2);
    return records(conn, "started");
}

// Waits until the pool's two processes are ready: jobs pushed before the second has booted
// would run one after the other on the first.
KiqdProcess& two_ready(KiqdProcess& kiqd) {
    REQUIRE(wait_until([&] { return kiqd::test::occurrences(kiqd.output(), " ready (") >= 2; },
                       std::chrono::seconds(90)));
    return kiqd;
}

// kiqd with `yaml` and BOOT_LOG, and two jobs running at once on its processes.
struct TwoJobsRunning {
    TwoJobsRunning(const RedisServer& server, redis::Connection& conn, const std::string& yaml)
        : kiqd(KIQD_BINARY, yaml, {}, boot_logged_env(server, dir)),
          started((two_ready(kiqd), two_jobs_at_once(server, conn))) {}
    TempDir dir;
    KiqdProcess kiqd;
    std::vector<nlohmann::json> started;
};

}  // namespace

TEST_CASE("runner: preload boots the app once and forks the children; none outlives kiqd",
          "[runner][preload]") {
    RUBY_CASE_BEGIN();
    TwoJobsRunning run(server, conn, runner_config(server));
    auto& [dir, kiqd, started] = run;
    const auto children = pids_of(started, 2);
    CHECK(children.size() == 2);  // two processes ran them at once
    // One boot (the master's; enqueue.rb runs without BOOT_LOG); both children are its forks.
    REQUIRE(lines_in(dir.file("boots.log")) == 1);
    const long long master = std::stoll(kiqd::test::read_file(dir.file("boots.log")));
    CHECK(pids_of(started, 3) == std::set<long long>{master});
    CHECK(kiqd.wait_for_output("forking 2 process(es)"));
    // kill -9 of kiqd: the master and its children go with it.
    kiqd.signal(SIGKILL);
    kiqd.wait_exit();
    CHECK(wait_until([&] { return !alive(master); }, std::chrono::seconds(10)));
    for (auto pid : children)
        CHECK(wait_until([&] { return !alive(pid); }, std::chrono::seconds(10)));
}

TEST_CASE("runner: children in kiqd processes, TTIN, /metrics and JSON log lines",
          "[runner][observability]") {
    RUBY_CASE_BEGIN();
    const int port = kiqd::test::free_port();
    KiqdProcess kiqd(KIQD_BINARY,
                     runner_config(server, "",
                                   fmt::format("metrics: {{listen: \"127.0.0.1:{}\"}}\n"
                                               "logging: {{format: json}}\n",
                                               port)),
                     {}, app_env(server));
    // "long": busy for longer than a heartbeat; stopped and requeued by kiqd.stop().
    const auto jids = enqueue(server, {{"PlainJob", 1, "two"}, {"TroubleJob", "long", "a"}});
    require_records(conn, "started", 1);
    // kiqd processes --json: the busy child with its job, from the heartbeat's kiqd_runners.
    nlohmann::json busy;
    std::string last;
    auto find_busy = [&] {
        auto [status, out] =
            run_command({KIQD_BINARY, "processes", "--json", "--redis-url", server.url()}, {});
        last = out;
        const auto procs =
            nlohmann::json::parse(out.substr(std::min(out.find('['), out.size())), nullptr, false);
        if (!procs.is_array() || procs.size() != 1) return false;
        // The long job's child: a heartbeat written while PlainJob still ran shows that one busy.
        for (const auto& c : procs[0]["runners"])
            if (c.value("state", "") == "busy" && c.value("jid", "") == jids[1]) busy = c;
        return busy.is_object();
    };
    if (!wait_until(find_busy, std::chrono::seconds(20))) FAIL("kiqd processes --json: " << last);
    CHECK(busy["runner"] == "ruby");
    CHECK(busy["class"] == "TroubleJob");
    CHECK(busy["pid"] == records(conn, "started")[0][2]);
    CHECK(busy["rss_kb"].get<long long>() > 0);
    // The text form lists the children under their process.
    auto [status, text] = run_command({KIQD_BINARY, "processes", "--redis-url", server.url()}, {});
    CHECK(text.find("TroubleJob " + jids[1]) != std::string::npos);
    CHECK(text.find("master") != std::string::npos);
    // /metrics: per slot, and the master's memory.
    const auto [code, metrics] = kiqd::test::http_get(port, "/metrics");
    REQUIRE(code == 200);
    CHECK(metrics.find("kiqd_runner_child_state{runner=\"ruby\",slot=\"" +
                       busy["slot"].get<std::string>() + "\",state=\"busy\"} 1") !=
          std::string::npos);
    CHECK(metrics.find("kiqd_runner_child_rss_bytes{runner=\"ruby\",slot=\"master\"}") !=
          std::string::npos);
    CHECK(metrics.find("kiqd_runner_child_jobs_total{runner=\"ruby\",slot=\"") !=
          std::string::npos);
    // TTIN logs each child.
    kiqd.signal(SIGTTIN);
    CHECK(kiqd.wait_for_output("state=busy jobs="));
    // The job's stdout as a JSON line with its class, jid, runner and stream.
    nlohmann::json line;
    if (!wait_until([&] {
            std::istringstream lines(kiqd.output());
            for (std::string l; std::getline(lines, l);) {
                auto j = nlohmann::json::parse(l, nullptr, false);
                if (j.is_object() && j.value("msg", "") == "plain job 1 two") line = j;
            }
            return line.is_object();
        }))
        FAIL(kiqd.output());
    CHECK(line["class"] == "PlainJob");
    CHECK(line["jid"] == jids[0]);
    CHECK(line["runner"] == "ruby");
    CHECK(line["stream"] == "stdout");
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("runner: a killed master takes its children along and is booted again",
          "[runner][preload]") {
    RUBY_CASE_BEGIN();
    TwoJobsRunning run(server, conn, runner_config(server));
    auto& [dir, kiqd, started] = run;
    require_records(conn, "finished", 2, std::chrono::seconds(30));
    const long long master = std::stoll(kiqd::test::read_file(dir.file("boots.log")));
    ::kill(static_cast<pid_t>(master), SIGKILL);
    // Its idle children die with it (PR_SET_PDEATHSIG); a new master boots and forks new ones.
    for (auto pid : pids_of(started, 2))
        CHECK(wait_until([&] { return !alive(pid); }, std::chrono::seconds(10)));
    REQUIRE(
        wait_until([&] { return lines_in(dir.file("boots.log")) == 2; }, std::chrono::seconds(30)));
    enqueue(server, {{"PlainJob", 5, "six"}});
    require_records(conn, "done", 1, std::chrono::seconds(30));
    CHECK(pids_of(started, 2).count(records(conn, "done")[0][5].get<long long>()) == 0);
    CHECK(kiqd.output().find("runner=ruby master pid=" + std::to_string(master)) !=
          std::string::npos);
    CHECK(kiqd.stop() == 0);
}

// Debian's Rails 6.1 (ruby-rails), or the world's: Rails 7.2 in sidekiq73, 8.1 in sidekiq81.
TEST_CASE("runner: a Rails application's ActiveJob job, booted once", "[runner][rails]") {
    REQUIRE_RUBY_STACK();
    auto [rails, version] =
        run_command({ruby(), "-e", "require 'rails'; print \"\\n\", Rails::VERSION::STRING"});
    if (rails != 0) {
        // A world whose gemfile has Rails must load it; Debian's may lack ruby-rails.
        const std::string lock =
            world().empty()
                ? ""
                : kiqd::test::read_file(kSource + "/tests/gemfiles/" + world() + ".gemfile.lock");
        if (lock.find("    railties (") != std::string::npos)
            FAIL("the " << world() << " world cannot load Rails: run bash scripts/install-gems "
                        << world() << "\n"
                        << version);
        WARN("skipped: " << (world().empty() ? "Debian's ruby-rails is not installed"
                                             : "the " + world() + " world has no Rails"));
        return;
    }
    INFO("Rails " << version.substr(version.rfind('\n') + 1) << ", Sidekiq " << sidekiq_version());
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    TempDir dir;
    const std::string app = kSource + "/tests/runners/rails_app";
    auto yaml = runner_config(server);
    yaml.replace(yaml.find(kApp + "/app.rb"), (kApp + "/app.rb").size(), app);
    KiqdProcess kiqd(KIQD_BINARY, yaml, {}, boot_logged_env(server, dir));
    auto [status, out] = run_command(
        {ruby(), "-e",
         "require '" + app +
             "/config/environment'; puts \"jid: #{InvoiceJob.perform_later(42).provider_job_id}\""},
        app_env(server));
    INFO(out);
    REQUIRE(status == 0);
    const std::string jid = out.substr(out.find("jid: ") + 5, 24);
    require_records(conn, "done", 1);
    const auto done = records(conn, "done")[0];
    CHECK(done[0] == "InvoiceJob");
    CHECK(done[2] == 42);
    CHECK(done[3] == jid);
    // Rails.logger's line, under the ActiveJob class and the Sidekiq jid.
    CHECK(kiqd.wait_for_output("class=InvoiceJob jid=" + jid));
    CHECK(kiqd.wait_for_output("invoice 42 in development"));
    // The master booted Rails once (the enqueuing process above had no BOOT_LOG).
    CHECK(lines_in(dir.file("boots.log")) == 1);
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("runner: preload off: kiqd starts each process itself", "[runner][preload]") {
    RUBY_CASE_BEGIN();
    // Either the runner declines the master's role, or the YAML does not ask for one.
    auto yaml = runner_config(server);
    SECTION("kiqd-ruby-runner --no-preload") {
        yaml.replace(yaml.find("\"--require\""), 11, "\"--no-preload\", \"--require\"");
    }
    SECTION("preload: false") {
        yaml = runner_config(server, "    preload: false\n");
    }
    TwoJobsRunning run(server, conn, yaml);
    auto& [dir, kiqd, started] = run;
    // Two boots, one per process; each process is kiqd's own child.
    CHECK(lines_in(dir.file("boots.log")) == 2);
    CHECK(pids_of(started, 2).size() == 2);
    CHECK(pids_of(started, 3) == std::set<long long>{kiqd.pid()});
    CHECK(kiqd.output().find("forking") == std::string::npos);
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("runner: config errors name the key", "[runner][config]") {
    auto& server = RedisServer::shared();
    auto check = [&](const std::string& extra, const std::string& expected) {
        auto [status, out] =
            kiqd::test::check_config(KIQD_BINARY, kiqd::test::default_queue_config(server, extra));
        INFO(out);
        CHECK(status == 78);
        CHECK(out.find(expected) != std::string::npos);
    };
    check("handlers:\n  Foo: {runner: nope}\n", "handlers.Foo.runner");
    check("runners:\n  r: {command: [x], processes: 0}\n", "runners.r.processes");
    check("runners:\n  r: {command: [x], max_jobs: -1}\n", "runners.r.max_jobs");
    check("runners:\n  r: {processes: 2}\n", "runners.r.command");
    check("runners:\n  r: {command: [x], bogus: 1}\n", "runners.r.bogus");
    check("runners:\n  r: {command: [x], preload: maybe}\n", "runners.r.preload");
    check("runners:\n  r: {command: [x]}\nhandlers:\n  \"*\": {runner: r, lock: until_executed}\n",
          "handlers.*.lock");
    check("runners:\n  r: {command: [x]}\nhandlers:\n  A: {runner: r, exec: [y]}\n",
          "handlers.A.runner");
}

// The same jobs through the Python runner (runners/python/kiqd_runner.py): the protocol is not
// Ruby's.
namespace {

const std::string kPyRunner = kSource + "/runners/python/kiqd_runner.py";
const std::string kPyApp = kSource + "/tests/runners/python_app";

std::string python_config(const RedisServer& server, const std::string& extra = "") {
    return kiqd::test::default_queue_config(
        server,
        "concurrency: 2\ntimeout: 1\nrunners:\n  py:\n    command: [\"/usr/bin/python3\", \"" +
            kPyRunner + "\", \"--path\", \"" + kPyApp +
            "\", \"--import\", \"jobs\"]\n    processes: 2\nhandlers:\n  \"*\": {runner: py}\n" +
            extra);
}

std::string push(redis::Connection& conn, const std::string& cls, const nlohmann::json& args,
                 int retry = 3) {
    static int n = 0;
    const std::string jid = fmt::format("{:024x}", 0xabc000 + ++n);
    const nlohmann::json payload{{"class", cls},        {"args", args},   {"jid", jid},
                                 {"queue", "default"},  {"retry", retry}, {"created_at", 1.7e9},
                                 {"enqueued_at", 1.7e9}};
    conn.command({"LPUSH", "queue:default", payload.dump()});
    return jid;
}

std::vector<nlohmann::json> file_records(const TempDir& dir, const std::string& kind) {
    std::vector<nlohmann::json> out;
    if (!fs::exists(dir.file(kind))) return out;
    std::istringstream lines(kiqd::test::read_file(dir.file(kind)));
    for (std::string l; std::getline(lines, l);)
        if (!l.empty()) out.push_back(nlohmann::json::parse(l));
    return out;
}

}  // namespace

TEST_CASE("python runner: jobs, Python tracebacks, retry_in, retries_exhausted, crashes",
          "[runner][python]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    TempDir out;
    KiqdProcess kiqd(KIQD_BINARY, python_config(server, "  TroubleJob: {runner: py, timeout: 2}\n"),
                     {}, {{"APP_OUT", out.path()}});
    const double before = static_cast<double>(std::time(nullptr));
    const auto plain = push(conn, "PlainJob", {1, "two"});
    const auto failing = push(conn, "Py::FailingJob", {7});
    const auto exhausted = push(conn, "ExhaustedJob", nlohmann::json::array(), 0);
    const auto crash = push(conn, "TroubleJob", {"exit"});
    const auto hang = push(conn, "TroubleJob", {"hang"});
    const auto unknown = push(conn, "NoSuchJob", nlohmann::json::array());
    REQUIRE(
        wait_until([&] { return zrange(conn, "retry").size() == 4; }, std::chrono::seconds(60)));
    REQUIRE(wait_until([&] { return file_records(out, "exhausted").size() == 1; }));
    const auto done = file_records(out, "done");
    REQUIRE(done.size() == 1);
    CHECK(done[0][1] == plain);
    CHECK(done[0][3] == "two");
    CHECK(kiqd.wait_for_output("class=PlainJob jid=" + plain));
    std::map<std::string, nlohmann::json> by_jid;
    for (const auto& s : zrange(conn, "retry")) {
        auto j = nlohmann::json::parse(s);
        j["score"] = std::stod(std::string(conn.command({"ZSCORE", "retry", s}).str()));
        by_jid[j["jid"]] = j;
    }
    CHECK(by_jid[failing]["error_class"] == "ValueError");
    CHECK(by_jid[failing]["error_message"] == "bad input 7");
    CHECK(by_jid[failing]["score"].get<double>() >= before + 1000);
    CHECK(by_jid[crash]["error_class"] == "Kiqd::RunnerCrashed");
    CHECK(by_jid[hang]["error_class"] == "Kiqd::Timeout");
    CHECK(by_jid[unknown]["error_class"] == "NameError");
    const auto dead = zrange(conn, "dead");
    REQUIRE(dead.size() == 1);
    CHECK(nlohmann::json::parse(dead[0])["jid"] == exhausted);
    CHECK(file_records(out, "exhausted")[0][1] == "OSError");
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("python runner: SIGTERM mid-job requeues, nothing runs twice", "[runner][python]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    TempDir out;
    {
        KiqdProcess kiqd(KIQD_BINARY, python_config(server), {}, {{"APP_OUT", out.path()}});
        push(conn, "TroubleJob", {"slow", "a"});
        REQUIRE(wait_until([&] { return file_records(out, "started").size() == 1; },
                           std::chrono::seconds(30)));
        CHECK(kiqd.stop() == 0);
    }
    CHECK(file_records(out, "finished").empty());
    CHECK(lrange(conn, "queue:default").size() == 1);
    KiqdProcess again(KIQD_BINARY, python_config(server), {}, {{"APP_OUT", out.path()}});
    REQUIRE(wait_until([&] { return file_records(out, "finished").size() == 1; },
                       std::chrono::seconds(30)));
    CHECK(again.stop() == 0);
    CHECK(file_records(out, "started").size() == 2);
}
