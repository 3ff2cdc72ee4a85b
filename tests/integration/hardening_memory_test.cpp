// Hardening [hardening][memory]: one payload within the size limit costs a real kiqd a bounded
// multiple of its size (issue 18, item 6; docs/hardening-bounds.md#payload-memory). A 16 MiB
// payload whose args are `[{},{},...]` is pushed to a real Redis and run by a real kiqd child;
// the growth of its peak RSS (VmHWM in /proc/<pid>/status, read once kiqd has written its
// heartbeat and again once the job is done) must stay within kPeakBound times the payload
// (plus a few fixed MiB). Before
// the fix the unique-jobs middleware, always in the chain, built the payload's whole JSON tree:
// ~45 times its size for Kiqd::Noop. A memory bound is a correctness property here (a payload of
// the allowed size must not be able to take a host's memory), not a speed threshold.
//
// Set KIQD_BINARY_UNDER_TEST to run it against another build (the code before the fix fails).
#include <signal.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/wait_until.hpp"

using kiqd::test::counter;
using kiqd::test::KiqdProcess;
using kiqd::test::RedisServer;
using kiqd::test::wait_until;
using kiqd::test::zcard;
using kiqd::test::zrange;

namespace {

// The documented bound (docs/hardening-bounds.md): peak RSS growth of at most kPeakBound bytes
// per payload byte, plus kFixedBytes of costs that do not grow with the payload (a process's
// first failure, its first large buffers).
constexpr long long kPeakBound = 10;
constexpr long long kFixedBytes = 4 * 1024 * 1024;

// A field of /proc/<pid>/status in bytes (VmHWM, VmRSS); -1 when it cannot be read.
long long status_bytes(pid_t pid, const std::string& field) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind(field + ":", 0) != 0) continue;
        std::istringstream fields(line.substr(field.size() + 1));
        long long kb = -1;
        fields >> kb;
        return kb * 1024;
    }
    return -1;
}

// A payload of just under `size` bytes: `head` members, then args of empty objects.
std::string payload_of(const std::string& head, size_t size) {
    std::string text = "{" + head + R"("queue":"default","jid":"memory-jid","args":[)";
    const std::string tail = "]}";
    bool first = true;
    while (text.size() + tail.size() + 3 <= size) {
        text += first ? "{}" : ",{}";
        first = false;
    }
    return text + tail;
}

}  // namespace

TEST_CASE("hardening: a payload at the size limit costs kiqd a bounded multiple of its size",
          "[hardening][memory]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    conn.command({"SADD", "queues", "default"});
    const size_t limit = 16 * 1024 * 1024;  // JobLimits' default max_payload_bytes

    std::string head;
    bool fails = false;
    std::string fetch = "basic";
    SECTION("Kiqd::Noop") {
        head = R"("class":"Kiqd::Noop","retry":true,)";
    }
    SECTION("a unique lock on the job's own lock_args, not on args") {
        head = R"("class":"Kiqd::Noop","retry":true,"lock":"while_executing","lock_args":["k"],)";
    }
    SECTION("a failing job that goes to the retry set") {
        head = R"("class":"Kiqd::Fail","retry":true,)";
        fails = true;
    }
    SECTION("a failing job under reliable fetch, whose acknowledgement carries it too") {
        head = R"("class":"Kiqd::Fail","retry":true,)";
        fails = true;
        fetch = "reliable";
    }
    const std::string payload = payload_of(head, limit - 1024);
    REQUIRE(payload.size() <= limit);
    REQUIRE(nlohmann::json::accept(payload));

    KiqdProcess kiqd(kiqd::test::binary_under_test(KIQD_BINARY),
                     kiqd::test::kiqd_config(
                         server, "concurrency: 1\nqueues: [default]\nfetch: " + fetch + "\n"));
    // Started: its heartbeat is in `processes`, so start-up allocations are behind it.
    REQUIRE(wait_until(
        [&] {
            return conn.command({"SCARD", "processes"}).integer() >= 1;
        },
        std::chrono::seconds(20)));
    const long long before = status_bytes(kiqd.pid(), "VmHWM");
    REQUIRE(before > 0);

    conn.command({"LPUSH", "queue:default", payload});
    const bool done = wait_until(
        [&] { return fails ? zcard(conn, "retry") == 1 : counter(conn, "stat:processed") == 1; },
        std::chrono::seconds(60));
    INFO("kiqd output:\n" << kiqd.output());
    REQUIRE(done);
    const long long peak = status_bytes(kiqd.pid(), "VmHWM");
    const long long growth = peak - before;
    const double multiple = static_cast<double>(growth) / static_cast<double>(payload.size());
    INFO("peak RSS grew by " << growth / (1024 * 1024) << " MiB, " << multiple
                             << " times the payload's " << payload.size() << " bytes");
    CHECK(growth <= kPeakBound * static_cast<long long>(payload.size()) + kFixedBytes);

    if (fails) {
        // The retry entry keeps the payload's args byte for byte.
        const auto retries = zrange(conn, "retry");
        REQUIRE(retries.size() == 1);
        const auto at = payload.find(R"("args":[)");
        CHECK(retries[0].find(payload.substr(at, payload.size() - at - 1)) != std::string::npos);
        // Counted once the stats are flushed (with the heartbeat).
        CHECK(wait_until([&] { return counter(conn, "stat:failed") == 1; },
                         std::chrono::seconds(30)));
    } else {
        CHECK(counter(conn, "stat:failed") == 0);
        CHECK(zcard(conn, "dead") == 0);
    }
    kiqd.signal(SIGTERM);
    CHECK(kiqd.wait_exit() == 0);
}
