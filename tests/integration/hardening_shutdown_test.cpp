// Hardening of the hard shutdown, against real kiqd processes sharing one Redis: a job's runs
// never overlap (an exec command that ignores SIGTERM is killed before its job goes back, and a
// second process only then starts it), a command that finishes within the grace is not run
// again, and jobs of in-process handlers that ignore the stop signal go back only as the process
// exits (basic fetch) or through orphan recovery (reliable fetch).
#include <signal.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "server/orphan_recovery.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/temp_dir.hpp"
#include "support/test_runtime.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using kiqd::test::KiqdProcess;
using kiqd::test::llen;
using kiqd::test::read_file;
using kiqd::test::RedisServer;
using kiqd::test::TempDir;
using kiqd::test::wait_until;
using kiqd::test::zcard;

namespace {

// What every run of a recording bash script ($EPOCHREALTIME) does first: takes an exclusive flock
// on a file of its jid, held by the run's shell until it is gone (SIGKILL included), and notes in
// `overlaps` when another run of the same jid still holds it; then appends "start <jid> <pid>
// <time>". While it runs it appends the time to alive.<pid> every 10 ms; at its end it appends "end
// <jid> <pid> <time>". The ticks' `sleep` does not hold the lock: when the group is killed, kiqd
// reaps the shell, the command's leader, and a killed `sleep` may take a moment longer to be gone
// on a loaded machine, while it can no longer do anything.
std::string recording_prelude(const TempDir& dir) {
    return "d='" + dir.path() +
           "'\n"
           "exec 9>>\"$d/lock.$KIQD_JID\"\n"
           "flock -n 9 || echo \"$KIQD_JID\" >> \"$d/overlaps\"\n"
           "echo \"start $KIQD_JID $$ $EPOCHREALTIME\" >> \"$d/runs\"\n"
           "tick() { echo \"$EPOCHREALTIME\" >> \"$d/alive.$$\"; sleep 0.01 9>&-; }\n";
}
const char* const kRecordEnd = "echo \"end $KIQD_JID $$ $EPOCHREALTIME\" >> \"$d/runs\"\n";

struct RecordedRun {
    std::string jid;
    std::string pid;
    double start = 0;
    double end = 0;  // its end line, or for a killed run its last alive tick
    bool finished = false;
};

// The runs recorded in `dir`, in start order.
std::vector<RecordedRun> runs_in(const TempDir& dir) {
    std::vector<RecordedRun> runs;
    std::map<std::string, size_t> by_pid;
    std::istringstream in(read_file(dir.file("runs")));
    for (std::string kind, jid, pid, time; in >> kind >> jid >> pid >> time;) {
        if (kind == "start") {
            by_pid[pid] = runs.size();
            runs.push_back({jid, pid, std::stod(time), std::stod(time), false});
        } else if (auto it = by_pid.find(pid); it != by_pid.end()) {
            runs[it->second].end = std::stod(time);
            runs[it->second].finished = true;
        }
    }
    for (auto& r : runs) {
        if (r.finished) continue;
        // The last complete line (a SIGKILL may cut the last one short).
        std::istringstream alive(read_file(dir.file("alive." + r.pid)));
        for (std::string line; std::getline(alive, line);)
            if (line.size() >= 10 && !alive.eof()) r.end = std::max(r.end, std::stod(line));
    }
    return runs;
}

size_t count_runs(const std::vector<RecordedRun>& runs, const std::string& jid,
                  bool finished_only) {
    return static_cast<size_t>(std::count_if(runs.begin(), runs.end(), [&](const RecordedRun& r) {
        return r.jid == jid && (r.finished || !finished_only);
    }));
}

// The largest overlap in seconds between two runs of one jid (negative: the smallest gap).
double max_run_overlap(const std::vector<RecordedRun>& runs) {
    double worst = -1e9;
    for (size_t i = 0; i < runs.size(); ++i)
        for (size_t j = 0; j < runs.size(); ++j)
            if (i != j && runs[i].jid == runs[j].jid && runs[i].start <= runs[j].start)
                worst = std::max(worst, runs[i].end - runs[j].start);
    return worst;
}

void push_recorded(redis::Connection& conn, const std::string& cls, const std::string& jid,
                   nlohmann::json args = nlohmann::json::array()) {
    const nlohmann::json job{
        {"class", cls}, {"args", std::move(args)}, {"jid", jid},          {"queue", "default"},
        {"retry", 3},   {"created_at", 1.7e9},     {"enqueued_at", 1.7e9}};
    conn.command({"SADD", "queues", "default"});
    conn.command({"LPUSH", "queue:default", job.dump()});
}

}  // namespace

TEST_CASE(
    "hard shutdown: an exec job never runs on two servers at once; one that finishes "
    "within the grace is not run again",
    "[shutdown][hardening][daemon]") {
    const std::string fetch = GENERATE(as<std::string>{}, "basic", "reliable");
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    TempDir dir("kiqd-shutdown");
    // Ignores SIGTERM. The first run of a jid runs until it is killed; a later run ends at once.
    const std::string stubborn =
        dir.script("stubborn.sh",
                   recording_prelude(dir) +
                       "trap '' TERM\n"
                       "if [ \"$(grep -c \"^start $KIQD_JID \" \"$d/runs\")\" = 1 ]; then\n"
                       "  while :; do tick; done\n"
                       "fi\n" +
                       kRecordEnd,
                   "/bin/bash");
    // Finishes its work (0.3 s) once it gets SIGTERM, and exits 0.
    const std::string graceful = dir.script("graceful.sh",
                                            recording_prelude(dir) +
                                                "stop=0\ntrap 'stop=1' TERM\n"
                                                "while [ $stop = 0 ]; do tick; done\n"
                                                "sleep 0.3\n" +
                                                kRecordEnd,
                                            "/bin/bash");
    const std::string yaml = kiqd::test::kiqd_config(
        server, "concurrency: 3\ntimeout: 1\nqueues: [default]\nfetch: " + fetch +
                    "\nhandlers:\n"
                    "  Test::Stubborn: {exec: ['" +
                    stubborn +
                    "'], timeout: 600}\n"
                    "  Test::Graceful: {exec: ['" +
                    graceful + "'], timeout: 600}\n");
    push_recorded(conn, "Test::Stubborn", "stubborn1");
    push_recorded(conn, "Test::Stubborn", "stubborn2");
    push_recorded(conn, "Test::Graceful", "graceful1");

    KiqdProcess first(KIQD_BINARY, yaml);
    REQUIRE(wait_until([&] { return runs_in(dir).size() == 3; }, std::chrono::seconds(20)));
    KiqdProcess second(KIQD_BINARY, yaml);
    // The second process fetches: every thread of the first is busy, so only it can take this.
    push_recorded(conn, "Kiqd::Noop", "probe");
    REQUIRE(wait_until([&] { return llen(conn, "queue:default") == 0; }, std::chrono::seconds(20)));

    first.signal(SIGTERM);
    CHECK(first.wait_exit() == 0);
    // The second process runs the interrupted jobs again; their second runs end at once.
    REQUIRE(wait_until(
        [&] {
            const auto runs = runs_in(dir);
            return count_runs(runs, "stubborn1", true) == 1 &&
                   count_runs(runs, "stubborn2", true) == 1;
        },
        std::chrono::seconds(20)));
    CHECK(second.stop() == 0);

    const auto runs = runs_in(dir);
    for (const auto& r : runs)
        std::printf("%s fetch: run of %s pid %s: %.3f → %.3f%s\n", fetch.c_str(), r.jid.c_str(),
                    r.pid.c_str(), r.start, r.end, r.finished ? "" : " (killed)");
    const double overlap = max_run_overlap(runs);
    std::printf("%s fetch: largest overlap of two runs of one jid: %.3f s\n", fetch.c_str(),
                overlap);
    // flock: a run that started while another run of its jid still existed.
    CHECK(read_file(dir.file("overlaps")).empty());
    CHECK(overlap < 0);
    // Killed once in the first process, run to its end once in the second.
    for (const std::string jid : {"stubborn1", "stubborn2"}) {
        CHECK(count_runs(runs, jid, false) == 2);
        CHECK(count_runs(runs, jid, true) == 1);
    }
    // Finished within the grace: acknowledged, not requeued.
    CHECK(count_runs(runs, "graceful1", false) == 1);
    CHECK(count_runs(runs, "graceful1", true) == 1);
    CHECK_THAT(first.output(), Catch::Contains("finished during the shutdown grace"));
    // Nothing lost, nothing left.
    CHECK(llen(conn, "queue:default") == 0);
    CHECK(zcard(conn, "retry") == 0);
    CHECK(zcard(conn, "dead") == 0);
    CHECK(conn.command({"SCARD", "kiqd:reliable:working"}).integer() == 0);
}

TEST_CASE(
    "hard shutdown: an in-process handler that ignores the stop signal keeps its job "
    "until the process is gone",
    "[shutdown][hardening][daemon]") {
    const std::string fetch = GENERATE(as<std::string>{}, "basic", "reliable");
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    // Test::Burn spins for args[0] seconds of CPU time and never looks at the stop signal.
    push_recorded(conn, "Test::Burn", "burner", nlohmann::json::array({60}));
    const std::string original(conn.command({"LINDEX", "queue:default", "0"}).str());
    KiqdProcess kiqd(KIQD_TEST_DAEMON,
                     kiqd::test::kiqd_config(server,
                                             "concurrency: 1\ntimeout: 1\nqueues: "
                                             "[default]\nfetch: " +
                                                 fetch + "\nreliable_fetch: {liveness_ttl: 3}\n"));
    REQUIRE(wait_until([&] { return llen(conn, "queue:default") == 0; }));
    REQUIRE(kiqd.wait_for_output("jid=burner queue=default start"));
    kiqd.signal(SIGTERM);
    // Not in the queue while the handler may still run: with basic fetch it goes back only in
    // the process's last step (logged, and flushed, just before), with reliable fetch never.
    while (kiqd.running()) {
        if (llen(conn, "queue:default") == 0) continue;
        REQUIRE(fetch == "basic");
        REQUIRE_THAT(kiqd.output(), Catch::Contains("pushed back to queue:default as the process "
                                                    "exits"));
        break;
    }
    CHECK(kiqd.wait_exit() == 0);
    CHECK_THAT(kiqd.output(), Catch::Contains("ignores the stop signal"));
    if (fetch == "basic") {
        // Pushed back as the process's last step.
        CHECK(kiqd::test::lrange(conn, "queue:default") == std::vector<std::string>{original});
        return;
    }
    // Reliable fetch: still in the working list; orphan recovery returns it once the liveness
    // key has expired.
    const auto working = kiqd::test::only_member(conn, "kiqd:reliable:working");
    REQUIRE(working);
    CHECK(kiqd::test::lrange(conn, *working) == std::vector<std::string>{original});
    CHECK(llen(conn, "queue:default") == 0);
    kiqd::test::TestRuntime t(server, {{"default", 0}}, 1, FetchMode::reliable);
    OrphanRecovery recovery(t.rt, *t.reliable());
    REQUIRE(wait_until([&] { return recovery.recover_orphans(conn, false).requeued == 1; },
                       std::chrono::seconds(10)));
    CHECK(kiqd::test::lrange(conn, "queue:default") == std::vector<std::string>{original});
}
