// Exec handlers (`handlers: {Class: {exec: [...]}}`) in the real kiqd binary: payload on stdin
// and KIQD_* environment, failures and retries, timeouts (SIGTERM and SIGKILL), commands that
// cannot start, shell metacharacters, hard shutdown, a command's own children ending with a
// killed kiqd (its group keeper), and 1,000 jobs without zombies or fd leaks.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiqd/client.hpp"
#include "support/http_get.hpp"
#include "support/job_pushes.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/temp_dir.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using kiqd::test::counter;
using kiqd::test::KiqdProcess;
using kiqd::test::llen;
using kiqd::test::parse_each;
using kiqd::test::RedisServer;
using kiqd::test::TempDir;
using kiqd::test::wait_until;
using kiqd::test::zcard;
using kiqd::test::zrange;
namespace fs = std::filesystem;

using kiqd::test::file_exists;

namespace {

std::string slurp(const std::string& path) {
    return kiqd::test::read_file(path);
}

std::string config_for(const RedisServer& server, const std::string& extra) {
    return kiqd::test::default_queue_config(server, extra);
}

// The single entry of the retry set, parsed.
nlohmann::json only_retry(redis::Connection& conn) {
    auto all = zrange(conn, "retry");
    REQUIRE(all.size() == 1);
    return nlohmann::json::parse(all[0]);
}

bool process_gone(pid_t pid) {
    return ::kill(pid, 0) != 0 && errno == ESRCH;
}

// Gone, or a zombie nobody has reaped yet (an orphan's new parent may not reap at once).
bool process_ended(pid_t pid) {
    if (process_gone(pid)) return true;
    const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
    const auto close = stat.rfind(')');
    return close == std::string::npos || stat.compare(close + 2, 1, "Z") == 0;
}

// Descriptors of `pid` other than sockets. What running a command could leak is a pipe, a file
// or /dev/null (exec_handler.cpp opens no socket); sockets are Redis connections, and a poller
// may open its own after its first interval, whenever that falls.
size_t fd_count(pid_t pid) {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
        std::error_code ec;
        if (fs::read_symlink(e.path(), ec).string().rfind("socket:", 0) != 0) ++n;
    }
    return n;
}

// What each descriptor of `pid` points at, one per line (shown when a count check fails).
std::string fd_targets(pid_t pid) {
    std::string out;
    for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
        std::error_code ec;
        out +=
            e.path().filename().string() + " -> " + fs::read_symlink(e.path(), ec).string() + "\n";
    }
    return out;
}

// A child process of a kiqd, from /proc.
struct ChildProcess {
    pid_t pid;
    char state;   // 'Z': a zombie
    bool keeper;  // kiqd's group keeper (handlers/group_keeper.hpp)
};

std::vector<ChildProcess> child_processes(pid_t parent) {
    std::vector<ChildProcess> out;
    for (const auto& e : fs::directory_iterator("/proc")) {
        const std::string name = e.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        const std::string stat = slurp(e.path().string() + "/stat");
        const auto close = stat.rfind(')');
        if (close == std::string::npos) continue;
        std::istringstream rest(stat.substr(close + 2));
        char state = 0;
        long ppid = 0;
        rest >> state >> ppid;
        if (ppid != parent) continue;
        out.push_back({std::stoi(name), state, stat.find("(kiqd-keeper)") != std::string::npos});
    }
    return out;
}

// Children of `pid` (any state), and how many of them are zombies. kiqd's group keeper, a
// child for kiqd's whole life, is not counted.
std::pair<int, int> children_of(pid_t pid) {
    int children = 0, zombies = 0;
    for (const auto& c : child_processes(pid)) {
        if (c.keeper) continue;
        ++children;
        if (c.state == 'Z') ++zombies;
    }
    return {children, zombies};
}

// kiqd's group keeper, or -1.
pid_t keeper_of(pid_t pid) {
    for (const auto& c : child_processes(pid))
        if (c.keeper && c.state != 'Z') return c.pid;
    return -1;
}

}  // namespace

TEST_CASE("exec: payload on stdin, KIQD_* environment, stdout logged with the jid", "[exec]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    TempDir dir;
    const std::string script =
        dir.script("record.sh",
                   "cat > \"$OUT/$KIQD_JID.stdin\"\n"
                   "printf '%s|%s|%s|%s' \"$KIQD_JID\" \"$KIQD_CLASS\" \"$KIQD_QUEUE\" "
                   "\"$KIQD_RETRY_COUNT\" > \"$OUT/$KIQD_JID.env\"\n"
                   "echo \"hello from $KIQD_CLASS\"\necho 'to stderr' >&2\n");
    // A big payload (more than a pipe buffer) must arrive whole.
    const std::string big(300000, 'x');
    const std::string payload =
        R"({"class":"ResizeImage","args":[")" + big +
        R"(",2],"jid":"0123456789abcdef01234567","queue":"default","retry":false})";
    conn.command({"LPUSH", "queue:default", payload});
    KiqdProcess kiqd(KIQD_BINARY,
                     config_for(server, "handlers:\n  ResizeImage:\n    exec: [\"/bin/sh\", \"" +
                                            script + "\"]\n    timeout: 30\n"),
                     {}, {{"OUT", dir.path()}});
    const std::string env_file = dir.file("0123456789abcdef01234567.env");
    REQUIRE(wait_until([&] { return file_exists(env_file) && !slurp(env_file).empty(); }));
    CHECK(slurp(env_file) == "0123456789abcdef01234567|ResizeImage|default|");
    CHECK(slurp(dir.file("0123456789abcdef01234567.stdin")) == payload);
    REQUIRE(kiqd.wait_for_output("jid=0123456789abcdef01234567 queue=default done"));
    CHECK_THAT(kiqd.output(),
               Catch::Contains("class=ResizeImage jid=0123456789abcdef01234567 stdout: hello "
                               "from ResizeImage"));
    CHECK_THAT(kiqd.output(), Catch::Contains("jid=0123456789abcdef01234567 stderr: to stderr"));
    CHECK(kiqd.stop() == 0);
    CHECK(zcard(conn, "retry") == 0);
}

TEST_CASE("exec: shell metacharacters in args reach stdin unchanged and run nothing", "[exec]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    TempDir dir;
    const std::string pwned = dir.file("pwned");
    const std::string script = dir.script("capture.sh", "cat > \"$OUT/$KIQD_JID.stdin\"");
    nlohmann::json args = nlohmann::json::array(
        {"$(touch " + pwned + ")", "`touch " + pwned + "`", "; touch " + pwned, "| touch " + pwned,
         "&& touch " + pwned + " &", "'\"\\ \n$HOME * ?", "> " + pwned});
    Client client(Keys{}, Compat::v6);
    const std::string jid = client.push(conn, {{"class", "Shelly"}, {"args", args}});
    const std::string raw(conn.command({"LINDEX", "queue:default", "0"}).str());
    KiqdProcess kiqd(KIQD_BINARY,
                     config_for(server, "handlers:\n  Shelly:\n    exec: [\"" + script +
                                            "\", \"$(touch " + pwned + ")\"]\n"),
                     {}, {{"OUT", dir.path()}});
    REQUIRE(kiqd.wait_for_output("jid=" + jid + " queue=default done"));
    CHECK(slurp(dir.file(jid + ".stdin")) == raw);
    CHECK(nlohmann::json::parse(slurp(dir.file(jid + ".stdin")))["args"] == args);
    CHECK_FALSE(file_exists(pwned));
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("exec: a failing command becomes a retry with status and stderr; the retry runs",
          "[exec]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    TempDir dir;
    // Fails on the first attempt (no retry_count yet), succeeds on the retry.
    const std::string script =
        dir.script("flaky.sh",
                   "cat > /dev/null\n"
                   "if [ -z \"$KIQD_RETRY_COUNT\" ]; then\n"
                   "  for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 "
                   "25 26 27 28 29 30; do echo \"noise $i\" >&2; done\n"
                   "  echo 'cannot resize: corrupt image' >&2; exit 3\nfi\n"
                   "echo \"$KIQD_RETRY_COUNT\" > \"$OUT/retried\"\n");
    Client client(Keys{}, Compat::v6);
    const std::string jid = client.push(conn, {{"class", "Flaky"}, {"args", {1}}});
    KiqdProcess kiqd(KIQD_BINARY,
                     config_for(server, "handlers:\n  Flaky:\n    exec: [\"" + script + "\"]\n"),
                     {}, {{"OUT", dir.path()}});
    REQUIRE(wait_until([&] { return zcard(conn, "retry") == 1; }));
    auto entry = only_retry(conn);
    CHECK(entry["jid"] == jid);
    CHECK(entry["error_class"] == "Kiqd::ExecError");
    const std::string msg = entry["error_message"];
    CHECK_THAT(msg, Catch::Contains(script + " exited with status 3"));
    CHECK_THAT(msg, Catch::Contains("cannot resize: corrupt image"));
    CHECK_THAT(msg, Catch::Contains("noise 30"));
    CHECK_THAT(msg, !Catch::Contains("noise 1\n"));  // only the last lines are kept
    CHECK(entry["retry_count"] == 0);
    // Make the retry due now; the scheduler moves it and the command succeeds.
    conn.command(
        {"ZADD", "retry", "0", std::string(conn.command({"ZRANGE", "retry", "0", "0"})[0].str())});
    REQUIRE(wait_until(
        [&] { return file_exists(dir.file("retried")) && !slurp(dir.file("retried")).empty(); }));
    CHECK(slurp(dir.file("retried")) == "0\n");
    CHECK(kiqd.stop() == 0);
    CHECK(zcard(conn, "retry") == 0);
}

TEST_CASE("exec: timeouts send SIGTERM, then SIGKILL after the grace period", "[exec]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    TempDir dir;
    const std::string polite =
        dir.script("polite.sh", "echo $$ > \"$OUT/polite.pid\"\nexec sleep 60");
    const std::string stubborn =
        dir.script("stubborn.sh", "trap '' TERM\necho $$ > \"$OUT/stubborn.pid\"\nsleep 60\n");
    Client client(Keys{}, Compat::v6);
    const std::string jid1 = client.push(conn, {{"class", "Polite"}});
    const std::string jid2 = client.push(conn, {{"class", "Stubborn"}});
    const int port = kiqd::test::free_port();
    KiqdProcess kiqd(KIQD_BINARY,
                     config_for(server, "metrics: {listen: \"127.0.0.1:" + std::to_string(port) +
                                            "\"}\nconcurrency: 2\nhandlers:\n"
                                            "  Polite:\n    exec: [\"" +
                                            polite +
                                            "\"]\n"
                                            "    timeout: 0.5\n"
                                            "  Stubborn:\n    exec: [\"" +
                                            stubborn +
                                            "\"]\n"
                                            "    timeout: 0.5\n    grace: 0.5\n"),
                     {}, {{"OUT", dir.path()}});
    REQUIRE(wait_until([&] { return zcard(conn, "retry") == 2; }));
    for (auto e : parse_each(zrange(conn, "retry"))) {
        INFO(e.dump());
        CHECK(e["error_class"] == "Kiqd::Timeout");
        const std::string msg = e["error_message"];
        CHECK_THAT(msg, Catch::Contains("did not finish within 0.5s"));
        if (e["jid"] == jid2)
            CHECK_THAT(msg, Catch::Contains("then SIGKILL after 0.5s"));
        else
            CHECK_THAT(msg, !Catch::Contains("SIGKILL"));
    }
    // Both scripts and the sleep they started (same process group) are gone.
    for (const std::string f : {"polite.pid", "stubborn.pid"})
        CHECK(process_gone(std::stoi(slurp(dir.file(f)))));
    CHECK(wait_until([&] { return children_of(kiqd.pid()).first == 0; }));
    // Both timeouts are counted on /metrics.
    const auto [code, metrics] = kiqd::test::http_get(port, "/metrics");
    CHECK(code == 200);
    CHECK_THAT(metrics, Catch::Contains("\nkiqd_exec_timeouts_total 2\n"));
    CHECK(kiqd.stop() == 0);
}

// A command that ended while kiqd could not run (stopped here; a VM pause or an overloaded
// machine in the wild), its exit seen only once its timeout has passed, ends as it ended:
// success, not Kiqd::Timeout, whose retry would run a finished job again. (The narrower race
// behind the timeout path's own reap, a thread woken by its deadline just before the exit is
// reported, is not reproducible from outside: a stopped kiqd sees the exit first.)
TEST_CASE("exec: a command that ended during a stall of kiqd past its timeout succeeds",
          "[exec][timeout]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    TempDir dir;
    const std::string script = dir.script(
        "gated.sh",
        "echo $$ > \"$OUT/gated.pid\"\nwhile [ ! -e \"$OUT/go\" ]; do sleep 0.01; done\n");
    Client client(Keys{}, Compat::v6);
    client.push(conn, {{"class", "Gated"}});
    KiqdProcess kiqd(KIQD_BINARY,
                     config_for(server, "handlers:\n  Gated:\n    exec: [\"" + script +
                                            "\"]\n    timeout: 0.5\n"),
                     {}, {{"OUT", dir.path()}});
    REQUIRE(wait_until([&] {
        return file_exists(dir.file("gated.pid")) && !slurp(dir.file("gated.pid")).empty();
    }));
    const pid_t command = std::stoi(slurp(dir.file("gated.pid")));
    const auto started = std::chrono::steady_clock::now();
    kiqd.signal(SIGSTOP);
    std::ofstream(dir.file("go")).put('\n');
    // The command exits (a zombie: its parent is stopped), and its timeout passes.
    REQUIRE(wait_until([&] { return process_ended(command); }));
    REQUIRE(wait_until(
        [&] { return std::chrono::steady_clock::now() - started > std::chrono::seconds(1); }));
    kiqd.signal(SIGCONT);
    REQUIRE(wait_until([&] { return counter(conn, "stat:processed") == 1; }));
    CHECK(zcard(conn, "retry") == 0);
    CHECK(conn.command({"GET", "stat:failed"}).optional_str().value_or("0") == "0");
    CHECK(kiqd.stop() == 0);
}

// A kiqd killed with SIGKILL (or crashed) must not leave its commands running: with reliable
// fetch a peer recovers the job from the working list and runs it again, and a command still
// running from the first kiqd would be a second copy at once. The command dies with kiqd
// (PR_SET_PDEATHSIG, handlers/child_spawn.hpp).
TEST_CASE("exec: a command dies with kiqd when kiqd is killed with SIGKILL", "[exec][pdeathsig]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    TempDir dir;
    const std::string script =
        dir.script("long.sh", "echo $$ > \"$OUT/long.pid\"\nexec sleep 600\n");
    Client client(Keys{}, Compat::v6);
    client.push(conn, {{"class", "Long"}});
    KiqdProcess kiqd(KIQD_BINARY,
                     config_for(server, "handlers:\n  Long:\n    exec: [\"" + script + "\"]\n"), {},
                     {{"OUT", dir.path()}});
    REQUIRE(wait_until(
        [&] { return file_exists(dir.file("long.pid")) && !slurp(dir.file("long.pid")).empty(); }));
    const pid_t child = std::stoi(slurp(dir.file("long.pid")));
    REQUIRE(!process_ended(child));
    kiqd.signal(SIGKILL);
    kiqd.wait_exit();
    CHECK(wait_until([&] { return process_ended(child); }));
}

namespace {

// The pids the processes of a test's script wrote, one a line, once there are `count`. On a
// failure: kiqd's log, where the job is in Redis, and who else is connected to the server.
std::vector<pid_t> await_pids(const KiqdProcess& kiqd, redis::Connection& conn,
                              const std::string& file, size_t count) {
    std::vector<pid_t> pids;
    const bool all = wait_until([&] {
        if (!file_exists(file)) return false;
        std::istringstream in(slurp(file));
        pids.clear();
        for (pid_t p; in >> p;) pids.push_back(p);
        return pids.size() == count;
    });
    if (!all) {
        std::string where = "queue:default " + std::to_string(llen(conn, "queue:default")) +
                            ", retry " + std::to_string(zcard(conn, "retry")) + ", dead " +
                            std::to_string(zcard(conn, "dead")) + "\n";
        for (const auto& set : {"retry", "dead"})
            for (const auto& entry : zrange(conn, set)) where += set + (": " + entry) + "\n";
        where += "CLIENT LIST:\n" + std::string(conn.command({"CLIENT", "LIST"}).str());
        INFO(where);
        INFO(kiqd.output());
        REQUIRE(all);
    }
    return pids;
}

// A command (tree.sh) whose own children ignore SIGTERM and write their pids to $OUT/pids: one
// started in the background, one two shells deep (`sh -c "…"`, as a wrapper script would).
std::string stubborn_tree(const TempDir& dir) {
    const std::string child =
        dir.script("child.sh", "trap '' TERM\necho $$ >> \"$OUT/pids\"\nexec sleep 600\n");
    return dir.script("tree.sh",
                      "\"" + child + "\" &\nsh -c '\"" + child + "\"; sleep 600' &\nwait\n");
}

bool all_ended(const std::vector<pid_t>& pids) {
    const bool ended =
        wait_until([&] { return std::all_of(pids.begin(), pids.end(), process_ended); });
    for (pid_t p : pids) ::kill(p, SIGKILL);  // leave nothing behind if they survived
    return ended;
}

}  // namespace

// PR_SET_PDEATHSIG reaches the command only. What the command started itself ends through
// kiqd's group keeper (handlers/group_keeper.hpp), however kiqd was started: here, by the test,
// with no service manager or container around it.
TEST_CASE("exec: a command's own children die with a killed kiqd, SIGTERM ignored or not",
          "[exec][pdeathsig]") {
    // A server of its own: what these tests wait for is a process tree on this machine, and a
    // job taken by anything else connected to a shared server would look like a spawn that
    // never happened.
    RedisServer server;
    auto conn = server.connect();
    TempDir dir;
    const std::string script = stubborn_tree(dir);
    Client client(Keys{}, Compat::v6);
    client.push(conn, {{"class", "Tree"}});
    KiqdProcess kiqd(KIQD_BINARY,
                     config_for(server, "handlers:\n  Tree:\n    exec: [\"" + script + "\"]\n"), {},
                     {{"OUT", dir.path()}});
    const auto pids = await_pids(kiqd, conn, dir.file("pids"), 2);
    for (pid_t p : pids) REQUIRE(!process_ended(p));
    // The keeper names itself once it runs: on a loaded machine, after the command's children.
    pid_t keeper = -1;
    REQUIRE(wait_until([&] { return (keeper = keeper_of(kiqd.pid())) > 0; }));
    kiqd.signal(SIGKILL);
    kiqd.wait_exit();
    CHECK(all_ended(pids));
    // The keeper ends too, its work done.
    CHECK(wait_until([&] { return process_ended(keeper); }));
}

// A keeper killed on its own is started again by the next command, which it then covers.
TEST_CASE("exec: a killed group keeper is replaced, and the next command's children are covered",
          "[exec][pdeathsig]") {
    // A server of its own: what these tests wait for is a process tree on this machine, and a
    // job taken by anything else connected to a shared server would look like a spawn that
    // never happened.
    RedisServer server;
    auto conn = server.connect();
    TempDir dir;
    const std::string script = stubborn_tree(dir);
    Client client(Keys{}, Compat::v6);
    client.push(conn, {{"class", "Quick"}});
    KiqdProcess kiqd(KIQD_BINARY,
                     config_for(server,
                                "concurrency: 2\nhandlers:\n  Quick:\n    exec: [\"/bin/true\"]\n"
                                "  Tree:\n    exec: [\"" +
                                    script + "\"]\n"),
                     {}, {{"OUT", dir.path()}});
    REQUIRE(wait_until([&] { return counter(conn, "stat:processed") == 1; }));
    pid_t first = -1;
    REQUIRE(wait_until([&] { return (first = keeper_of(kiqd.pid())) > 0; }));
    ::kill(first, SIGKILL);
    REQUIRE(wait_until([&] { return process_ended(first); }));
    client.push(conn, {{"class", "Tree"}});
    const auto pids = await_pids(kiqd, conn, dir.file("pids"), 2);
    // The new keeper names itself once it runs (it may start after the command's children).
    pid_t second = -1;
    CHECK(wait_until([&] {
        second = keeper_of(kiqd.pid());
        return second > 0 && second != first;
    }));
    kiqd.signal(SIGKILL);
    kiqd.wait_exit();
    CHECK(all_ended(pids));
}

TEST_CASE("exec: a command that cannot start fails the job; check-config warns", "[exec]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    TempDir dir;
    const std::string not_exec = dir.write("plain.txt", "echo hi\n");
    const std::string yaml =
        config_for(server,
                   "handlers:\n  Missing:\n    exec: [\"/nonexistent/bin/job\", \"x\"]\n"
                   "  NotExec:\n    exec: [\"" +
                       not_exec +
                       "\"]\n"
                       "  NoSuchName:\n    exec: [\"kiqd-no-such-command\"]\n"
                       "  Fine:\n    exec: [\"true\"]\n");
    auto [code, out] = kiqd::test::check_config(KIQD_BINARY, yaml);
    CHECK(code == 0);
    CHECK_THAT(out, Catch::Contains("warning: handlers.Missing (line 5): cannot be started: "
                                    "/nonexistent/bin/job: No such file or directory"));
    CHECK_THAT(out, Catch::Contains("handlers.NotExec (line 7): cannot be started: " + not_exec +
                                    ": not executable"));
    CHECK_THAT(out, Catch::Contains("kiqd-no-such-command: not found in PATH"));
    CHECK_THAT(out, !Catch::Contains("handlers.Fine"));
    CHECK_THAT(out, Catch::Contains("4 exec handler(s)"));

    Client client(Keys{}, Compat::v6);
    client.push(conn, {{"class", "Missing"}});
    client.push(conn, {{"class", "NotExec"}});
    client.push(conn, {{"class", "Fine"}});
    KiqdProcess kiqd(KIQD_BINARY, yaml);
    REQUIRE(wait_until([&] { return zcard(conn, "retry") == 2; }));
    std::map<std::string, std::string> messages;
    for (auto e : parse_each(zrange(conn, "retry"))) {
        CHECK(e["error_class"] == "Kiqd::ExecError");
        messages[e["class"]] = e["error_message"];
    }
    CHECK(messages["Missing"] == "cannot start /nonexistent/bin/job: No such file or directory");
    CHECK(messages["NotExec"] == "cannot start " + not_exec + ": Permission denied");
    // Logged at start-up; the log reaches its file within the logger's flush interval.
    CHECK(kiqd.wait_for_output("handlers.Missing (line 5): cannot be started"));
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("exec: kiqd's hard shutdown stops running commands and requeues their jobs", "[exec]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    TempDir dir;
    const std::string script = dir.script("long.sh", "echo $$ > \"$OUT/long.pid\"\nexec sleep 60");
    Client client(Keys{}, Compat::v6);
    client.push(conn, {{"class", "Long"}});
    const std::string original(conn.command({"LINDEX", "queue:default", "0"}).str());
    KiqdProcess kiqd(KIQD_BINARY,
                     config_for(server, "timeout: 1\nhandlers:\n  Long:\n    exec: [\"" + script +
                                            "\"]\n    timeout: 60\n"),
                     {}, {{"OUT", dir.path()}});
    REQUIRE(wait_until([&] { return !slurp(dir.file("long.pid")).empty(); }));
    const pid_t child = std::stoi(slurp(dir.file("long.pid")));
    CHECK(kiqd.stop() == 0);
    CHECK(process_gone(child));
    auto queue = kiqd::test::lrange(conn, "queue:default");
    REQUIRE(queue.size() == 1);
    CHECK(queue[0] == original);
    CHECK(zcard(conn, "retry") == 0);
    CHECK_THAT(kiqd.output(), Catch::Contains("stopped by shutdown"));
}

TEST_CASE("exec: 1,000 quick jobs at concurrency 10 leave no zombies and no leaked fds",
          "[exec][load]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    auto push = [&](int n) {
        kiqd::test::push_copies(
            conn, {{"class", "Quick"}, {"args", nlohmann::json::array({1, "two"})}}, n);
    };
    KiqdProcess kiqd(KIQD_BINARY, config_for(server,
                                             "concurrency: 10\nlogging: {level: warn}\n"
                                             "handlers:\n  Quick:\n    exec: [\"/bin/true\"]\n"));
    // Warm up: every processor thread has had jobs (and so its Redis connection), the
    // heartbeat has run. Enough jobs that all ten threads take part on a loaded machine too.
    push(300);
    REQUIRE(wait_until([&] { return counter(conn, "stat:processed") == 300; },
                       std::chrono::seconds(60)));
    const std::string fds_warm = fd_targets(kiqd.pid());
    // The least of a few samples: one may catch a descriptor another thread holds for an
    // instant (the heartbeat reads /proc/self/status for its RSS).
    size_t fds_before = fd_count(kiqd.pid());
    for (int i = 0; i < 4; ++i) fds_before = std::min(fds_before, fd_count(kiqd.pid()));
    push(1000);
    REQUIRE(wait_until([&] { return counter(conn, "stat:processed") == 1300; },
                       std::chrono::seconds(120)));
    CHECK(conn.command({"GET", "stat:failed"}).optional_str().value_or("0") == "0");
    CHECK(zcard(conn, "retry") == 0);
    CHECK(children_of(kiqd.pid()) == std::pair<int, int>{0, 0});
    // Awaited for the same reason: a transient descriptor goes, a leaked one never does.
    const bool back = wait_until([&] { return fd_count(kiqd.pid()) == fds_before; });
    INFO("descriptors after the warm-up:\n" << fds_warm << "now:\n" << fd_targets(kiqd.pid()));
    CHECK(back);
    CHECK(kiqd.stop() == 0);
}
