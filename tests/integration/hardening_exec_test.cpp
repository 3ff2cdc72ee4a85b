// Hardening of what kiqd shares with the processes and clients around it, against the real
// binary: an exec handler's command gets descriptors 0-2 only and none of kiqd's secrets (so it
// cannot reuse kiqd's authenticated Redis connections), every descriptor kiqd opens itself is
// close-on-exec, idle metrics clients cannot take the descriptors jobs need, and text from jobs
// (class names, exec output) cannot forge or break log lines.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "kiqd/redis/connection.hpp"
#include "server/logging.hpp"
#include "server/metrics_server.hpp"
#include "support/http_get.hpp"
#include "support/kiqd_process.hpp"
#include "support/metrics_server_fixture.hpp"
#include "support/redis_server.hpp"
#include "support/temp_dir.hpp"
#include "support/wait_until.hpp"

using kiqd::test::KiqdProcess;
using kiqd::test::read_file;
using kiqd::test::RedisServer;
using kiqd::test::TempDir;
using kiqd::test::wait_until;
namespace fs = std::filesystem;

using kiqd::test::lines_of;

namespace {

// An executable bash script in `dir` (bash: dash cannot redirect to descriptors above 9).
std::string bash_script(const TempDir& dir, const std::string& name, const std::string& body) {
    return dir.script(name, body, "/bin/bash");
}

void push_payload(kiqd::redis::Connection& conn, const nlohmann::json& job) {
    conn.command({"LPUSH", "queue:default", job.dump()});
}

nlohmann::json exec_job(const std::string& cls, const std::string& jid) {
    return {{"class", cls},
            {"args", nlohmann::json::array()},
            {"jid", jid},
            {"queue", "default"},
            {"retry", false}};
}

size_t count_lines_with(const std::string& text, const std::vector<std::string>& parts) {
    size_t n = 0;
    for (const auto& line : lines_of(text)) {
        bool all = true;
        for (const auto& p : parts) all = all && line.find(p) != std::string::npos;
        n += all;
    }
    return n;
}

// The variable names in an `env` listing.
std::set<std::string> variable_names(const std::string& env) {
    std::set<std::string> names;
    for (const auto& line : lines_of(env))
        if (const auto eq = line.find('='); eq != std::string::npos)
            names.insert(line.substr(0, eq));
    return names;
}

// The descriptors an `ls -l /proc/self/fd` listing shows, without ls's own handle on the
// directory it lists.
std::set<int> listed_fds(const std::string& listing) {
    std::set<int> fds;
    for (const auto& line : lines_of(listing)) {
        const auto arrow = line.find(" -> ");
        if (arrow == std::string::npos) continue;
        const std::string target = line.substr(arrow + 4);
        if (target.rfind("/proc/", 0) == 0 && target.size() > 3 &&
            target.compare(target.size() - 3, 3, "/fd") == 0)
            continue;
        const auto space = line.rfind(' ', arrow - 1);
        fds.insert(std::stoi(line.substr(space + 1, arrow - space - 1)));
    }
    return fds;
}

std::set<int> open_fds(pid_t pid) {
    std::set<int> fds;
    for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd"))
        fds.insert(std::stoi(e.path().filename().string()));
    return fds;
}

// The RLIMIT_NOFILE that leaves exactly `n` descriptor numbers free below it. A new descriptor
// takes the lowest free number, and the limit bounds numbers, not counts: with `fds.size() + n`,
// the holes below a high-numbered descriptor would be free too, and a process whose descriptors
// are spread out (a reconnect, a closed session) could take many more.
rlim_t limit_leaving(const std::set<int>& fds, size_t n) {
    // The limit is the (n+1)-th free number: the n free ones below it stay usable.
    size_t free = 0;
    for (int fd = 0;; ++fd)
        if (!fds.count(fd) && free++ == n) return static_cast<rlim_t>(fd);
}

// Only the test client's own connection is left on `server`: every connection kiqd had is
// closed, so Redis has executed everything that was ever written into one of them.
bool only_our_client_left(kiqd::redis::Connection& conn) {
    const auto list = std::string(conn.command({"CLIENT", "LIST"}).str());
    return lines_of(list).size() == 1;
}

// A blocking TCP connection to 127.0.0.1:port from this test process, closed at scope end.
struct SocketClient {
    explicit SocketClient(int port) : fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<uint16_t>(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        connected = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
        const timeval patience{10, 0};  // a read gives up after this (an answer never came)
        ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof patience);
    }
    ~SocketClient() { ::close(fd); }
    SocketClient(const SocketClient&) = delete;
    SocketClient& operator=(const SocketClient&) = delete;
    void send(const std::string& s) const { (void)!::write(fd, s.data(), s.size()); }
    // Everything until the server closes (or the patience runs out).
    std::string read_all() const {
        std::string out;
        char buf[4096];
        for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
        return out;
    }
    int fd;
    bool connected = false;
};

// GET http://127.0.0.1:port/healthz → the status, 0 when nothing answered.
int healthz_status(int port) {
    SocketClient c(port);
    if (!c.connected) return 0;
    c.send("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    const std::string response = c.read_all();
    if (response.rfind("HTTP/1.1 ", 0) != 0 || response.size() < 12) return 0;
    return std::stoi(response.substr(9, 3));
}

const char* kSecret = "s3cret-Pa55word";

}  // namespace

TEST_CASE("exec hardening: the command sees descriptors 0-2 only and none of kiqd's secrets",
          "[exec][hardening]") {
    RedisServer server({"--requirepass", kSecret});
    auto conn = server.connect();
    TempDir dir("kiqd-hardening");
    const std::string script = bash_script(dir, "inspect.sh",
                                           "ls -l /proc/self/fd > \"$OUT/fds\"\n"
                                           "env > \"$OUT/env\"\n"
                                           "touch \"$OUT/done\"");
    const std::string url_with_secret =
        "redis://:" + std::string(kSecret) + "@127.0.0.1:" + std::to_string(server.port()) + "/0";
    // The password comes from redis.password_env; the environment also holds the URL forms
    // Sidekiq deployments use (REDIS_URL, REDIS_PROVIDER naming another variable) and a copy of
    // the password under an unrelated name.
    KiqdProcess kiqd(KIQD_BINARY,
                     "redis: {url: \"" + server.url() +
                         "\", password_env: KIQD_TEST_REDIS_PASSWORD}\n"
                         "queues: [default]\nconcurrency: 2\n"
                         "handlers:\n  Inspect: {exec: [\"" +
                         script + "\"]}\n",
                     {},
                     {{"OUT", dir.path()},
                      {"KIQD_TEST_REDIS_PASSWORD", kSecret},
                      {"REDIS_URL", server.url()},
                      {"REDIS_PROVIDER", "APP_REDIS"},
                      {"APP_REDIS", url_with_secret},
                      {"COPY_OF_THE_PASSWORD", std::string("x") + kSecret + "x"},
                      {"KEEP_ME", "visible"}});
    push_payload(conn, exec_job("Inspect", "0123456789abcdef0000aaaa"));
    REQUIRE(wait_until([&] { return fs::exists(dir.file("done")); }));

    INFO("ls -l /proc/self/fd in the command:\n" << read_file(dir.file("fds")));
    CHECK(listed_fds(read_file(dir.file("fds"))) == std::set<int>{0, 1, 2});

    const std::string env = read_file(dir.file("env"));
    INFO("the command's environment:\n" << env);
    CHECK(env.find(kSecret) == std::string::npos);
    const auto names = variable_names(env);
    for (const char* name : {"REDIS_URL", "REDIS_PROVIDER", "APP_REDIS", "KIQD_TEST_REDIS_PASSWORD",
                             "COPY_OF_THE_PASSWORD"})
        CHECK(names.count(name) == 0);
    for (const char* name : {"KEEP_ME", "OUT", "PATH", "KIQD_JID"}) CHECK(names.count(name) == 1);
    CHECK(count_lines_with(env, {"KEEP_ME=visible"}) == 1);
    CHECK(count_lines_with(env, {"KIQD_JID=0123456789abcdef0000aaaa"}) == 1);
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("exec hardening: raw commands written into every inherited descriptor reach no Redis",
          "[exec][hardening]") {
    RedisServer server({"--requirepass", kSecret});
    auto conn = server.connect();
    TempDir dir("kiqd-hardening");
    // Writes SET pwned 1 (RESP) into every descriptor above 2 it has; notes the ones that took
    // it.
    const std::string script =
        bash_script(dir, "inject.sh",
                    "for fd in $(ls /proc/$$/fd); do\n"
                    "  [ \"$fd\" -gt 2 ] || continue\n"
                    "  printf '*3\\r\\n$3\\r\\nSET\\r\\n$5\\r\\npwned\\r\\n$1\\r\\n1\\r\\n' "
                    "2>/dev/null >&\"$fd\" "
                    "&& echo \"$fd\" >> \"$OUT/written\"\n"
                    "done\n"
                    "touch \"$OUT/done\"");
    KiqdProcess kiqd(KIQD_BINARY,
                     "redis: {url: \"" + server.url() +
                         "\", password_env: KIQD_TEST_REDIS_PASSWORD}\n"
                         "queues: [default]\nconcurrency: 3\n"
                         "handlers:\n  Inject: {exec: [\"" +
                         script + "\"]}\n",
                     {}, {{"OUT", dir.path()}, {"KIQD_TEST_REDIS_PASSWORD", kSecret}});
    push_payload(conn, exec_job("Inject", "0123456789abcdef0000bbbb"));
    REQUIRE(wait_until([&] { return fs::exists(dir.file("done")); }));
    INFO("descriptors the command could write to: " << read_file(dir.file("written")));
    CHECK(read_file(dir.file("written")).empty());
    // kiqd still works after the command (its connections were never written into).
    push_payload(conn, exec_job("Kiqd::Noop", "0123456789abcdef0000cccc"));
    REQUIRE(wait_until([&] {
        return count_lines_with(kiqd.output(), {"jid=0123456789abcdef0000cccc", " done: "}) == 1;
    }));
    CHECK(kiqd.stop() == 0);
    // Once every connection kiqd had is closed, Redis has run whatever was written into them.
    REQUIRE(wait_until([&] { return only_our_client_left(conn); }));
    CHECK(conn.command({"EXISTS", "pwned"}).integer() == 0);
}

TEST_CASE("cloexec: Redis connections, the metrics listener and its sessions, log files",
          "[exec][hardening]") {
    auto& server = RedisServer::shared();
    server.flushall();
    const auto before = open_fds(::getpid());
    auto conn = server.connect();
    conn.command({"PING"});
    char log_path[] = "/tmp/kiqd-cloexec-log-XXXXXX";
    ::close(::mkstemp(log_path));
    kiqd::LoggingConfig logging;
    logging.file = log_path;
    auto log = kiqd::make_logger(logging, false);
    kiqd::test::LoopbackMetricsServer ms(server.options(), *log);
    SocketClient client(ms.port());
    REQUIRE(client.connected);
    // The session's socket is open once a request has been answered on it.
    client.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    char buf[512];
    REQUIRE(::read(client.fd, buf, sizeof buf) > 0);

    const auto after = open_fds(::getpid());
    size_t new_fds = 0;
    for (int fd : after) {
        if (before.count(fd) || fd == client.fd) continue;
        const int flags = ::fcntl(fd, F_GETFD);
        if (flags < 0) continue;  // gone again (open_fds's own handle on the directory)
        ++new_fds;
        std::error_code ec;
        INFO("fd " << fd << " -> " << fs::read_symlink("/proc/self/fd/" + std::to_string(fd), ec));
        CHECK((flags & FD_CLOEXEC) != 0);
    }
    // The test connection, the metrics server's own connection, the listener, the session, the
    // log file (and asio's internals) at least.
    CHECK(new_fds >= 5);
    ms.stop();
    log->flush();
    ::unlink(log_path);
}

TEST_CASE("metrics hardening: idle clients beyond the cap cannot starve jobs of descriptors",
          "[metrics][hardening]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    TempDir dir("kiqd-hardening");
    const std::string script = bash_script(dir, "record.sh", "touch \"$OUT/$KIQD_JID\"");
    const int port = kiqd::test::free_port();
    KiqdProcess kiqd(
        KIQD_BINARY,
        kiqd::test::kiqd_config(server,
                                "queues: [default]\nconcurrency: 2\n"
                                "metrics: {listen: \"127.0.0.1:" +
                                    std::to_string(port) + "\"}\nhandlers:\n  Record: {exec: [\"" +
                                    script + "\"]}\n"),
        {}, {{"OUT", dir.path()}});
    REQUIRE(wait_until([&] { return healthz_status(port) == 200; }));
    // Room for 64 metrics sessions and a margin for jobs (an exec job needs 7 descriptors at
    // once) and reconnects; far less than the 300 connections below would take uncapped.
    const auto before = open_fds(kiqd.pid());
    const size_t baseline = before.size();
    const rlim_t limit = limit_leaving(before, 64 + 24);
    const rlimit lowered{limit, limit};
    REQUIRE(::prlimit(kiqd.pid(), RLIMIT_NOFILE, &lowered, nullptr) == 0);

    std::vector<std::unique_ptr<SocketClient>> clients;
    for (int i = 0; i < 300; ++i) {
        clients.push_back(std::make_unique<SocketClient>(port));
        // A keep-alive request, then silence.
        if (clients.back()->connected)
            clients.back()->send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    }
    // kiqd has taken as many of them as it will.
    REQUIRE(wait_until([&] { return open_fds(kiqd.pid()).size() >= baseline + 60; }));

    for (int i = 0; i < 10; ++i)
        push_payload(conn, exec_job("Record", "0123456789abcdef000000" + std::to_string(10 + i)));
    CHECK(wait_until([&] {
        for (int i = 0; i < 10; ++i)
            if (!fs::exists(dir.file("0123456789abcdef000000" + std::to_string(10 + i))))
                return false;
        return true;
    }));
    CHECK(open_fds(kiqd.pid()).size() < limit);
    CHECK(conn.command({"ZCARD", "retry"}).integer() == 0);
    CHECK(conn.command({"ZCARD", "dead"}).integer() == 0);
    INFO(kiqd.output());
    CHECK(kiqd.output().find("Too many open files") == std::string::npos);

    clients.clear();
    CHECK(wait_until([&] { return healthz_status(port) == 200; }, std::chrono::seconds(30)));
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("metrics hardening: accept() out of descriptors backs off, logs once, recovers",
          "[metrics][hardening]") {
    auto& server = RedisServer::shared();
    server.flushall();
    const int port = kiqd::test::free_port();
    KiqdProcess kiqd(KIQD_BINARY,
                     kiqd::test::kiqd_config(server, "queues: [default]\nconcurrency: 1\n" +
                                                         kiqd::test::metrics_listen(port)));
    REQUIRE(wait_until([&] { return healthz_status(port) == 200; }));
    // Every Redis connection kiqd keeps is open first (the processor's and the scheduler's open
    // on first use, after /healthz answers): one opened while no descriptor is left fails, and
    // its error path is not what this test is about. Under UBSan it would even end the daemon:
    // the first vptr check of an object (the caught error's what()) writes the vtable into a
    // pipe to see whether it is readable, and without a descriptor it reports "invalid vptr";
    // UBSan reads its suppressions only at its first report, too late to help.
    auto conn = server.connect();
    const std::string ours = ":" + std::to_string(kiqd.pid()) + ":";  // its identity has its pid
    REQUIRE(wait_until([&] {
        const auto clients = lines_of(std::string(conn.command({"CLIENT", "LIST"}).str()));
        for (const char* role : {":heartbeat ", ":processor-0 ", ":scheduler "})
            if (std::none_of(clients.begin(), clients.end(), [&](const std::string& c) {
                    return c.find(ours) != std::string::npos && c.find(role) != std::string::npos;
                }))
                return false;
        return true;
    }));
    // Fewer descriptors than the session cap: accept() itself runs out (EMFILE).
    const auto before = open_fds(kiqd.pid());
    const rlim_t limit = limit_leaving(before, 8);
    INFO("kiqd's descriptors before the limit: " << before.size() << ", the highest "
                                                 << *before.rbegin() << "; limit " << limit);
    const rlimit lowered{limit, limit};
    REQUIRE(::prlimit(kiqd.pid(), RLIMIT_NOFILE, &lowered, nullptr) == 0);
    {
        std::vector<std::unique_ptr<SocketClient>> clients;
        for (int i = 0; i < 40; ++i) clients.push_back(std::make_unique<SocketClient>(port));
        if (!wait_until([&] {
                return kiqd.output().find("metrics: cannot accept connections") !=
                       std::string::npos;
            }))
            FAIL("accept() never ran out; kiqd's log:\n" << kiqd.output());
    }
    // Once the clients are gone, the endpoint answers again, and the episode was logged once.
    const bool answers =
        wait_until([&] { return healthz_status(port) == 200; }, std::chrono::seconds(30));
    const bool logged = wait_until([&] {
        return kiqd.output().find("metrics: accepting connections again") != std::string::npos;
    });
    const size_t episodes = count_lines_with(kiqd.output(), {"metrics: cannot accept connections"});
    const int code = kiqd.stop();
    INFO("kiqd's log:\n" << kiqd.output());
    CHECK(answers);
    CHECK(logged);
    CHECK(episodes == 1);
    CHECK(code == 0);
}

namespace {

// A class name that tries to forge a "done" line and clear the terminal, and exec output with
// control bytes, a C1 control (CSI, U+009B) and bytes that are not UTF-8.
const std::string kForgedClass =
    "Evil\n2026-01-01T00:00:00.000Z pid=1 tid=1 info: class=Forged jid=x queue=default done: "
    "1.000 ms\x1b[2J";
const char* kEvilOutputScript = "printf 'out\\033[2Jline\\r\\001\\177\\302\\233\\377\\376 end\\n'";

struct InjectionRun {
    InjectionRun(const std::string& format) {
        auto& server = RedisServer::shared();
        server.flushall();
        auto conn = server.connect();
        const std::string script = bash_script(dir, "noisy.sh", kEvilOutputScript);
        KiqdProcess kiqd(KIQD_BINARY,
                         kiqd::test::kiqd_config(server,
                                                 "queues: [default]\nconcurrency: 1\n"
                                                 "logging: {format: " +
                                                     format + "}\nhandlers:\n  Noisy: {exec: [\"" +
                                                     script + "\"]}\n"));
        auto evil = exec_job("Kiqd::Noop", "0123456789abcdef0000dddd");
        evil["display_class"] = kForgedClass;
        push_payload(conn, evil);
        push_payload(conn, exec_job("Noisy", "0123456789abcdef0000eeee"));
        // The done line of each job: text "jid=J queue=default done: ", JSON keys.
        auto done = [&](const std::string& jid) {
            return format == "json"
                       ? std::vector<std::string>{"\"msg\":\"done\"", "\"jid\":\"" + jid + "\""}
                       : std::vector<std::string>{"jid=" + jid + " queue=default done: "};
        };
        REQUIRE(wait_until([&] {
            const std::string out = kiqd.output();
            return count_lines_with(out, done("0123456789abcdef0000dddd")) == 1 &&
                   count_lines_with(out, done("0123456789abcdef0000eeee")) == 1;
        }));
        REQUIRE(kiqd.stop() == 0);
        output = kiqd.output();
    }
    TempDir dir{"kiqd-hardening"};
    std::string output;
};

}  // namespace

TEST_CASE("log injection: text logs escape control bytes; one line per event", "[logging]") {
    InjectionRun run("text");
    INFO(run.output);
    CHECK(run.output.find('\x1b') == std::string::npos);
    CHECK(run.output.find('\r') == std::string::npos);
    for (const auto& line : lines_of(run.output))
        CHECK(line.rfind("2026-01-01T00:00:00.000Z", 0) == std::string::npos);
    const std::string escaped_class =
        "class=Evil\\n2026-01-01T00:00:00.000Z pid=1 tid=1 info: class=Forged jid=x "
        "queue=default done: 1.000 ms\\x1b[2J jid=0123456789abcdef0000dddd queue=default";
    CHECK(count_lines_with(run.output, {escaped_class + " start"}) == 1);
    CHECK(count_lines_with(run.output, {escaped_class + " done: "}) == 1);
    CHECK(count_lines_with(run.output, {"class=Forged"}) == 2);  // only inside those two lines
    CHECK(count_lines_with(run.output, {"jid=0123456789abcdef0000eeee stdout: "
                                        "out\\x1b[2Jline\\r\\x01\\x7f\\u009b\\xff\\xfe end"}) == 1);
    CHECK(count_lines_with(run.output, {"stdout: "}) == 1);
}

TEST_CASE("log injection: JSON logs are valid JSON, invalid UTF-8 becomes U+FFFD", "[logging]") {
    InjectionRun run("json");
    INFO(run.output);
    size_t class_lines = 0, stdout_lines = 0;
    for (const auto& line : lines_of(run.output)) {
        nlohmann::json j;
        REQUIRE_NOTHROW(j = nlohmann::json::parse(line));
        // The job's fields are keys of the line; the forged class stays one value.
        if (j.value("class", "") == kForgedClass) {
            CHECK(j.at("jid") == "0123456789abcdef0000dddd");
            CHECK((j.at("msg") == "start" || j.at("msg") == "done"));
            ++class_lines;
        }
        if (j.value("stream", "") == "stdout") {
            CHECK(j.at("class") == "Noisy");
            CHECK(j.at("jid") == "0123456789abcdef0000eeee");
            CHECK(j.at("msg") == "out\x1b[2Jline\r\x01\x7f\xc2\x9b\xef\xbf\xbd\xef\xbf\xbd end");
            ++stdout_lines;
        }
    }
    CHECK(class_lines == 2);  // start and done
    CHECK(stdout_lines == 1);
    // Nothing a terminal acts on is in the file itself: controls are \u escapes there.
    CHECK(run.output.find('\x1b') == std::string::npos);
    CHECK(run.output.find("\xc2\x9b") == std::string::npos);
}
