// The cron poller against a real Redis: sidekiq-cron's keys written and read as the gem does,
// each run enqueued once however many pollers race (threads in-process, and two kiqd daemons),
// the 60 s window for a late poll, disabled and deleted jobs, and `kiqd cron` against the store.
#include <catch2/catch.hpp>
#include <set>
#include <thread>

#include "cron/cron_expression.hpp"
#include "cron/cron_poller.hpp"
#include "kiqd/client.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/test_runtime.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using kiqd::test::KiqdProcess;
using kiqd::test::llen;
using kiqd::test::lrange;
using kiqd::test::RedisServer;
using kiqd::test::TestRuntime;
using kiqd::test::wait_until;
using kiqd::test::zcard;

namespace {

CronScheduleSpec spec(const std::string& name, const std::string& cron,
                      const std::string& args = "[]") {
    CronScheduleSpec s;
    s.name = name;
    s.cron = cron;
    s.job_class = "ReportJob";
    s.queue = "reports";
    s.args_json = args;
    return s;
}

// 2026-11-26 10:00:00 UTC and the minutes after it.
constexpr double kTen = 1795687200;

// A flushed shared Redis, a runtime, the client and store a poller uses, and a connection.
struct CronFixture {
    RedisServer& server = flushed();
    TestRuntime t{server};
    Client client{t.keys, t.config.compat};
    CronStore store{t.keys};
    redis::Connection conn = server.connect();

    static RedisServer& flushed() {
        auto& s = RedisServer::shared();
        s.flushall();
        return s;
    }
};

}  // namespace

TEST_CASE("cron: a run is enqueued once, with the gem's bookkeeping", "[cron]") {
    CronFixture f;
    auto& [server, t, client, store, conn] = f;
    CronPoller poller(t.rt, client);
    store.save(conn, spec("hourly", "0 * * * * UTC", R"([1,"two"])"), kTen - 1800);
    // Saved at 09:30: the 09:00 run is claimed already, so nothing fires for it.
    CHECK(zcard(conn, "cron_job:hourly:enqueued") == 1);
    CHECK(poller.enqueue_due(conn, kTen - 1800) == 0);
    // 10:00:20: the 10:00 run is due and within the 60 s window.
    CHECK(poller.enqueue_due(conn, kTen + 20) == 1);
    CHECK(poller.enqueue_due(conn, kTen + 40) == 0);  // claimed
    auto jobs = lrange(conn, "queue:reports");
    REQUIRE(jobs.size() == 1);
    auto j = nlohmann::json::parse(jobs[0]);
    CHECK(j["class"] == "ReportJob");
    CHECK(j["args"] == nlohmann::json::parse(R"([1,"two"])"));
    CHECK(j["queue"] == "reports");
    CHECK(j["retry"] == true);
    CHECK(j["jid"].get<std::string>().size() == 24);
    CHECK(conn.command({"SISMEMBER", "queues", "reports"}).integer() == 1);
    CHECK(conn.command({"HGET", "cron_job:hourly", "last_enqueue_time"}).str() ==
          "2026-11-26 10:00:20 +0000");
    CHECK(conn.command({"ZSCORE", "cron_job:hourly:enqueued", "2026-11-26T10:00:00Z"}).str() ==
          "1795687200");
    auto history = lrange(conn, "cron_job:hourly:jid_history");
    REQUIRE(history.size() == 1);
    CHECK(nlohmann::json::parse(history[0]) ==
          nlohmann::json{{"jid", j["jid"]}, {"enqueued", "2026-11-26 10:00:20 UTC"}});
    // 11:01:30: the 11:00 run is 90 s old: skipped, as the gem skips it (a restart that long).
    CHECK(poller.enqueue_due(conn, kTen + 3600 + 90) == 0);
    // 12:00:59: within the window, enqueued once.
    CHECK(poller.enqueue_due(conn, kTen + 7200 + 59) == 1);
    CHECK(llen(conn, "queue:reports") == 2);
}

TEST_CASE("cron: the gem's reschedule_grace_period and cron_history_size, when set", "[cron]") {
    CronFixture f;
    auto& [server, t, client, store, conn] = f;
    t.config.cron_reschedule_grace_period = 300;
    t.config.cron_history_size = 2;
    CronPoller poller(t.rt, client);
    store.save(conn, spec("hourly", "0 * * * * UTC"), kTen - 1800);
    // 10:04:00: 240 s late, within a 300 s grace period (the default 60 s would skip it).
    CHECK(poller.enqueue_due(conn, kTen + 240) == 1);
    // 11:05:01: 301 s late: skipped.
    CHECK(poller.enqueue_due(conn, kTen + 3600 + 301) == 0);
    CHECK(poller.enqueue_due(conn, kTen + 7200 + 10) == 1);
    CHECK(poller.enqueue_due(conn, kTen + 3 * 3600 + 10) == 1);
    // Three runs, the last two in the history.
    CHECK(llen(conn, "queue:reports") == 3);
    CHECK(llen(conn, "cron_job:hourly:jid_history") == 2);
}

TEST_CASE(
    "cron: sidekiq-scheduler's at: and in: are pushed once, by the poll before they are due; an "
    "at: run once across pollers, an in: run once per process",
    "[cron]") {
    CronFixture f;
    auto& [server, t, client, store, conn] = f;
    CronScheduleSpec at = spec("launch", "", R"(["go"])");
    at.once_at = kTen + 600;
    CronScheduleSpec in = spec("warmup", "");
    in.once_in = 300;
    t.config.cron = {at, in};
    CronPoller a(t.rt, client), b(t.rt, client);
    a.set_started(kTen);
    b.set_started(kTen + 10);
    const auto scheduled = [&] { return zcard(conn, "schedule"); };
    // 10:00: both runs further away than the next poll.
    CHECK(a.push_one_offs(conn, kTen, 45) == 0);
    CHECK(scheduled() == 0);
    // 10:04:30: a's in: run (10:05) is due before its next poll: pushed for 10:05, once.
    CHECK(a.push_one_offs(conn, kTen + 270, 45) == 1);
    CHECK(a.push_one_offs(conn, kTen + 280, 45) == 0);
    auto pushed = conn.command({"ZRANGE", "schedule", "0", "-1", "WITHSCORES"});
    REQUIRE(pushed.size() == 2);
    auto j = nlohmann::json::parse(std::string(pushed[0].str()));
    CHECK(j["class"] == "ReportJob");
    CHECK(j["queue"] == "reports");
    CHECK(j["jid"].get<std::string>().size() == 24);
    CHECK_FALSE(j.contains("at"));
    CHECK(std::stod(std::string(pushed[1].str())) == kTen + 300);
    // b started 10 s later: its own in: run, for 10:05:10.
    CHECK(b.push_one_offs(conn, kTen + 280, 45) == 1);
    CHECK(scheduled() == 2);
    // 10:09:30: the at: run (10:10) is pushed once, whichever poller comes first.
    CHECK(a.push_one_offs(conn, kTen + 570, 45) + b.push_one_offs(conn, kTen + 571, 45) == 1);
    CHECK(scheduled() == 3);
    CHECK(
        conn.command({"ZCOUNT", "schedule", std::to_string(kTen + 600), std::to_string(kTen + 600)})
            .integer() == 1);
    // A process started after the at: time (past the 60 s grace) skips it; its in: run is its own.
    CronPoller late(t.rt, client);
    late.set_started(kTen + 661);
    CHECK(late.push_one_offs(conn, kTen + 661, 45) == 0);
    CHECK(scheduled() == 3);
}

TEST_CASE("cron: disabled, deleted and broken jobs are not enqueued", "[cron]") {
    CronFixture f;
    auto& [server, t, client, store, conn] = f;
    CronPoller poller(t.rt, client);
    auto off = spec("off", "* * * * * UTC");
    off.enabled = false;
    store.save(conn, off, kTen - 600);
    store.save(conn, spec("gone", "* * * * * UTC"), kTen - 600);
    store.save(conn, spec("fine", "* * * * * UTC"), kTen - 600);
    conn.command({"HSET", "cron_job:broken", "name", "broken", "klass", "X", "cron", "0 25 * * *",
                  "status", "enabled"});
    conn.command({"SADD", "cron_jobs", "cron_job:broken"});
    store.destroy(conn, "gone");
    CHECK(poller.enqueue_due(conn, kTen + 5) == 1);  // only "fine"
    CHECK(llen(conn, "queue:reports") == 1);
    CHECK(conn.command({"HGET", "cron_job:off", "last_enqueue_time"}).str().empty());
    CHECK(t.logs().find("cron: job broken: cron line '0 25 * * *' is not usable") !=
          std::string::npos);
    // Enabling it again (as the Web UI does) lets its next run through.
    conn.command({"HSET", "cron_job:off", "status", "enabled"});
    CHECK(poller.enqueue_due(conn, kTen + 65) == 2);
}

TEST_CASE("cron: racing pollers enqueue each run exactly once", "[cron]") {
    CronFixture f;
    auto& [server, t, client, store, conn] = f;
    for (int i = 0; i < 200; ++i)
        store.save(conn, spec("job" + std::to_string(i), "* * * * * UTC"), kTen - 600);
    CronPoller a(t.rt, client), b(t.rt, client), c(t.rt, client);
    size_t total = 0;
    std::mutex m;
    std::vector<std::thread> threads;
    for (auto* p : {&a, &b, &c})
        threads.emplace_back([&, p] {
            auto own = server.connect();
            size_t n = 0;
            for (double now : {kTen + 1, kTen + 2, kTen + 61, kTen + 62})
                n += p->enqueue_due(own, now);
            std::lock_guard lock(m);
            total += n;
        });
    for (auto& th : threads) th.join();
    CHECK(total == 400);  // 200 jobs × the 10:00 and 10:01 runs
    CHECK(llen(conn, "queue:reports") == 400);
    std::set<std::string> jids;
    for (const auto& p : lrange(conn, "queue:reports"))
        jids.insert(nlohmann::json::parse(p)["jid"].get<std::string>());
    CHECK(jids.size() == 400);
}

TEST_CASE("cron: two kiqd daemons share the YAML's schedule and enqueue each run once",
          "[cron][daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    // Every second; the daemons serve another queue, so the cron jobs stay to be counted.
    const std::string yaml = kiqd::test::kiqd_config(server,
                                                     "queues: [elsewhere]\n"
                                                     "cron_poll_interval: 0.2\n"
                                                     "cron:\n"
                                                     "  - name: every_second\n"
                                                     "    cron: \"* * * * * * UTC\"\n"
                                                     "    class: Tick\n"
                                                     "    args: [42]\n"
                                                     "    queue: ticks\n");
    KiqdProcess one(KIQD_BINARY, yaml), two(KIQD_BINARY, yaml);
    auto conn = server.connect();
    REQUIRE(wait_until([&] { return llen(conn, "queue:ticks") >= 8; }, std::chrono::seconds(30)));
    REQUIRE(one.stop() == 0);
    REQUIRE(two.stop() == 0);
    const auto enqueued = llen(conn, "queue:ticks");
    // Each enqueue is logged with the run it is for: no run twice, none unlogged.
    std::multiset<std::string> runs;
    const std::string both = one.output() + two.output();
    const std::string marker = "cron: enqueued every_second (Tick) due at ";
    for (size_t at = both.find(marker); at != std::string::npos; at = both.find(marker, at + 1))
        runs.insert(both.substr(at + marker.size(), 20));
    CHECK(static_cast<long long>(runs.size()) == enqueued);
    CHECK(std::set<std::string>(runs.begin(), runs.end()).size() == runs.size());
    // Every run enqueued holds its claim in the gem's set.
    for (const auto& run : std::set<std::string>(runs.begin(), runs.end()))
        CHECK_FALSE(conn.command({"ZSCORE", "cron_job:every_second:enqueued", run}).is_nil());
    for (const auto& p : lrange(conn, "queue:ticks")) {
        auto j = nlohmann::json::parse(p);
        CHECK(j["class"] == "Tick");
        CHECK(j["args"] == nlohmann::json::array({42}));
    }
    // The schedule is in sidekiq-cron's keys, where the gem's API and Web UI read it.
    CHECK(conn.command({"SISMEMBER", "cron_jobs", "cron_job:every_second"}).integer() == 1);
    CHECK(conn.command({"HGET", "cron_job:every_second", "source"}).str() == "schedule");
    CHECK(conn.command({"HGET", "cron_job:every_second", "status"}).str() == "enabled");

    // `kiqd cron --json` reports what the store holds.
    auto [status, out] =
        kiqd::test::run_command({KIQD_BINARY, "cron", "--json", "-C", one.config_path()});
    REQUIRE(status == 0);
    auto list = nlohmann::json::parse(out);
    REQUIRE(list.size() == 1);
    CHECK(list[0]["name"] == "every_second");
    CHECK(list[0]["status"] == "enabled");
    CHECK(list[0]["in_config"] == true);
    CHECK(list[0]["last_enqueue_time"] ==
          conn.command({"HGET", "cron_job:every_second", "last_enqueue_time"}).str());
    CHECK(list[0]["next_run_at"].get<long long>() > list[0]["last_enqueue_at"].get<long long>());
}
