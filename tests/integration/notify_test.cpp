// Operations: the sd_notify protocol of the real kiqd binary against a NOTIFY_SOCKET this test
// owns (READY, STATUS, STOPPING, WATCHDOG with WATCHDOG_USEC/WATCHDOG_PID), SIGHUP reopening the
// log file, and `systemd-analyze verify` / `security` on the shipped units.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <optional>
#include <regex>

#include "kiqd/client.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_server.hpp"
#include "support/staged_units.hpp"
#include "support/temp_dir.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using kiqd::test::KiqdProcess;
using kiqd::test::read_file;
using kiqd::test::RedisServer;
using kiqd::test::StagedUnits;
using kiqd::test::TempDir;
using kiqd::test::wait_until;
namespace fs = std::filesystem;

namespace {

// The systemd side of the protocol: a unix datagram socket that collects every message.
class NotifySocket {
  public:
    // abstract: bind in the abstract namespace ("@name"), as systemd may do.
    explicit NotifySocket(bool abstract = false) {
        fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        REQUIRE(fd_ >= 0);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        socklen_t len;
        if (abstract) {
            name_ = "@kiqd-notify-test-" + std::to_string(::getpid()) + "-" +
                    std::to_string(counter_++);
            std::memcpy(addr.sun_path, name_.data(), name_.size());
            addr.sun_path[0] = '\0';
            len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name_.size());
        } else {
            dir_.emplace("kiqd-notify");
            name_ = dir_->file("notify.sock");
            std::memcpy(addr.sun_path, name_.c_str(), name_.size() + 1);
            len = sizeof addr;
        }
        REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0);
    }
    ~NotifySocket() { ::close(fd_); }
    const std::string& name() const { return name_; }

    // Reads messages until one satisfies `pred` (returned) or the timeout passes ("" then).
    std::string wait_for(const std::function<bool(const std::string&)>& pred,
                         std::chrono::milliseconds timeout = std::chrono::seconds(15)) {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        for (;;) {
            for (size_t i = seen_; i < messages_.size(); ++i) {
                if (pred(messages_[i])) {
                    seen_ = i + 1;
                    return messages_[i];
                }
            }
            seen_ = messages_.size();
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) return "";
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
            char buf[4096];
            const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
            if (n > 0) messages_.emplace_back(buf, static_cast<size_t>(n));
        }
    }
    std::string wait_for(const std::string& contains,
                         std::chrono::milliseconds timeout = std::chrono::seconds(15)) {
        return wait_for([&](const std::string& m) { return m.find(contains) != std::string::npos; },
                        timeout);
    }
    // Everything received so far (after draining what is queued).
    const std::vector<std::string>& drain() {
        char buf[4096];
        ssize_t n;
        while ((n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT)) > 0)
            messages_.emplace_back(buf, static_cast<size_t>(n));
        return messages_;
    }
    size_t count(const std::string& exact) {
        const auto& all = drain();
        return static_cast<size_t>(std::count(all.begin(), all.end(), exact));
    }

  private:
    static inline int counter_ = 0;
    int fd_ = -1;
    std::optional<TempDir> dir_;  // holds the socket file; none in the abstract namespace
    std::string name_;
    std::vector<std::string> messages_;
    size_t seen_ = 0;
};

}  // namespace

TEST_CASE("systemd: READY after Redis answers, STATUS, STOPPING, WATCHDOG", "[systemd]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    NotifySocket sock;
    KiqdProcess kiqd(
        KIQD_BINARY,
        kiqd::test::kiqd_config(server, "concurrency: 2\ntimeout: 1\nqueues: [default]\n"), {},
        {{"NOTIFY_SOCKET", sock.name()}, {"WATCHDOG_USEC", "300000"}});
    // The first ping is sent as the event loop starts; then every WATCHDOG_USEC/2.
    REQUIRE_FALSE(sock.wait_for("WATCHDOG=1").empty());
    REQUIRE_FALSE(sock.wait_for("READY=1").empty());
    // READY comes after the first heartbeat reached Redis: the process is registered.
    CHECK(conn.command({"SCARD", "processes"}).integer() == 1);
    CHECK_FALSE(sock.wait_for("STATUS=0 of 2 busy").empty());
    // Pings keep coming while the process runs.
    const size_t pings = sock.count("WATCHDOG=1");
    REQUIRE(wait_until([&] { return sock.count("WATCHDOG=1") >= pings + 3; }));

    Client client(Keys{}, Compat::v6);
    client.push(conn, {{"class", "Kiqd::Sleep"}, {"args", {60}}});
    CHECK_FALSE(sock.wait_for("STATUS=1 of 2 busy").empty());

    kiqd.signal(SIGTERM);
    const std::string stopping = sock.wait_for("STOPPING=1");
    CHECK_THAT(stopping, Catch::Contains("STATUS=stopping"));
    CHECK(kiqd.wait_exit() == 0);
    // Only well-formed assignments were sent, and READY exactly once.
    CHECK(sock.count("READY=1") == 1);
    for (const auto& m : sock.drain())
        CHECK(std::regex_match(m, std::regex("([A-Z_]+=[^\n]*\n?)+")));
    // The notify variables are not passed on to exec-handler children (checked below too).
}

TEST_CASE("systemd: no READY while Redis is unreachable; READY once it answers", "[systemd]") {
    RedisServer server;
    server.stop();
    NotifySocket sock(/*abstract=*/true);
    KiqdProcess kiqd(KIQD_BINARY,
                     kiqd::test::kiqd_config(server, "timeout: 1\nqueues: [default]\n"), {},
                     {{"NOTIFY_SOCKET", sock.name()}});
    CHECK_FALSE(sock.wait_for("waiting for Redis").empty());  // a beat failed: no READY yet
    CHECK(sock.count("READY=1") == 0);
    server.start();
    CHECK_FALSE(sock.wait_for("READY=1", std::chrono::seconds(30)).empty());
    // No WATCHDOG_USEC: no pings.
    CHECK(sock.count("WATCHDOG=1") == 0);
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("systemd: WATCHDOG_PID naming another process disables the pings", "[systemd]") {
    auto& server = RedisServer::shared();
    server.flushall();
    NotifySocket sock;
    KiqdProcess kiqd(
        KIQD_BINARY,
        kiqd::test::kiqd_config(server,
                                "timeout: 1\nqueues: [default]\nhandlers:\n"
                                "  Test::Env: {exec: [\"/usr/bin/env\"]}\n"),
        {}, {{"NOTIFY_SOCKET", sock.name()}, {"WATCHDOG_USEC", "100000"}, {"WATCHDOG_PID", "1"}});
    // A first ping would have been sent before READY (see above), so none by now means none.
    REQUIRE_FALSE(sock.wait_for("READY=1").empty());
    CHECK(sock.count("WATCHDOG=1") == 0);
    // An exec handler's environment has no NOTIFY_SOCKET/WATCHDOG_*: children cannot talk to
    // systemd in kiqd's name.
    auto conn = server.connect();
    Client(Keys{}, Compat::v6).push(conn, {{"class", "Test::Env"}});
    REQUIRE(kiqd.wait_for_output("PATH="));
    CHECK(kiqd.output().find("NOTIFY_SOCKET") == std::string::npos);
    CHECK(kiqd.output().find("WATCHDOG_") == std::string::npos);
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("systemd: SIGHUP reopens the log file at its configured path", "[systemd]") {
    auto& server = RedisServer::shared();
    server.flushall();
    const TempDir dir("kiqd-logrotate");
    const std::string log = dir.file("kiqd.log");
    KiqdProcess kiqd(KIQD_BINARY,
                     kiqd::test::kiqd_config(
                         server, "timeout: 1\nqueues: [default]\nlogging: {file: " + log + "}\n"));
    REQUIRE(wait_until([&] { return read_file(log).find("starting") != std::string::npos; }));
    fs::rename(log, log + ".1");  // what logrotate does
    kiqd.signal(SIGHUP);
    REQUIRE(wait_until([&] { return read_file(log).find("reopened") != std::string::npos; }));
    CHECK(kiqd.running());  // SIGHUP does not kill it
    auto conn = server.connect();
    const std::string jid = Client(Keys{}, Compat::v6).push(conn, {{"class", "Kiqd::Noop"}});
    REQUIRE(wait_until([&] { return read_file(log).find("jid=" + jid) != std::string::npos; }));
    CHECK(read_file(log + ".1").find("jid=" + jid) == std::string::npos);
    CHECK(read_file(log + ".1").find("starting") != std::string::npos);
    CHECK(kiqd.stop() == 0);
    CHECK(read_file(log).find("Bye!") != std::string::npos);
}

TEST_CASE("systemd: systemd-analyze verifies both units and rates them 2.0 or lower", "[systemd]") {
    if (!StagedUnits::analyze_available()) {
        WARN("systemd-analyze not installed: skipped (apt-get install systemd)");
        return;
    }
    const StagedUnits units(KIQD_SOURCE_DIR, KIQD_BINARY);
    auto [code, out] = units.analyze("verify kiqd.service kiqd@.service kiqd@1.service");
    INFO(out);
    CHECK(code == 0);
    CHECK(out.empty());
    for (const std::string unit : {"kiqd.service", "kiqd@1.service"}) {
        // --threshold is the exposure × 10: a non-zero exit above 2.0.
        auto [scode, sout] = units.analyze("security --offline=true --threshold=20 " + unit);
        std::smatch m;
        const bool rated =
            std::regex_search(sout, m, std::regex("Overall exposure level for \\S+: ([0-9.]+)"));
        INFO(sout);
        REQUIRE(rated);
        WARN(unit << ": systemd-analyze security exposure " << m[1]);
        CHECK(scode == 0);
        CHECK(std::stod(m[1]) <= 2.0);
    }
}
