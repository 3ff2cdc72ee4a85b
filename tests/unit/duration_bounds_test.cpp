// Durations: every duration key of the config is bounded at 366 days (a ConfigError naming the
// key and its line, which `kiqd` turns into exit 78), and the deadline arithmetic saturates
// instead of wrapping into the past (kiqd/deadline.hpp).
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <limits>
#include <thread>

#include "kiqd/config.hpp"
#include "kiqd/deadline.hpp"
#include "kiqd/job_context.hpp"
#include "support/config_errors.hpp"
#include "support/wait_until.hpp"

using kiqd::test::validation_error_of;

namespace {

const std::string kTooLong = "must be at most 31622400 seconds (366 days)";

}  // namespace

TEST_CASE("every duration key beyond 366 days names the key and its line", "[config][durations]") {
    struct Case {
        std::string yaml, expected;
    };
    const std::vector<Case> cases{
        {"timeout: 9999999999\n", "timeout (line 1): " + kTooLong},
        {"concurrency: 2\ntimeout: 31622401\n", "timeout (line 2): " + kTooLong},
        {"dead_timeout_in_seconds: 31622401\n", "dead_timeout_in_seconds (line 1): " + kTooLong},
        {"average_scheduled_poll_interval: 4e7\n",
         "average_scheduled_poll_interval (line 1): " + kTooLong},
        {"poll_interval_average: 4e7\n", "poll_interval_average (line 1): " + kTooLong},
        {"redis:\n  connect_timeout: 9999999999\n", "redis.connect_timeout (line 2): " + kTooLong},
        {"reliable_fetch:\n  orphan_check_interval: 4e7\n",
         "reliable_fetch.orphan_check_interval (line 2): " + kTooLong},
        {"reliable_fetch:\n  liveness_ttl: 4e7\n",
         "reliable_fetch.liveness_ttl (line 2): " + kTooLong},
        {"concurrency_limits:\n  slot_ttl: 4e7\n",
         "concurrency_limits.slot_ttl (line 2): " + kTooLong},
        {"concurrency_limits:\n  check_interval: 4e7\n",
         "concurrency_limits.check_interval (line 2): " + kTooLong},
        {"unique_jobs:\n  default_lock_ttl: 4e7\n",
         "unique_jobs.default_lock_ttl (line 2): " + kTooLong},
        {"unique_jobs:\n  reaper_interval: 4e7\n",
         "unique_jobs.reaper_interval (line 2): " + kTooLong},
        {"unique_jobs:\n  wait_interval: 4e7\n", "unique_jobs.wait_interval (line 2): " + kTooLong},
        {"pause_control:\n  refresh_interval: 4e7\n",
         "pause_control.refresh_interval (line 2): " + kTooLong},
        {"pause_control:\n  resume_interval: 4e7\n",
         "pause_control.resume_interval (line 2): " + kTooLong},
        {"fair_tenant:\n  max_throttling_window: 31622401\n",
         "fair_tenant.max_throttling_window (line 2): must be a whole number of seconds from 1 to "
         "31622400 (366 days)"},
        {"handlers:\n  A:\n    exec: [/bin/true]\n    timeout: 9999999999\n",
         "handlers.A.timeout (line 4): " + kTooLong},
        {"handlers:\n  A:\n    exec: [/bin/true]\n    grace: 4e7\n",
         "handlers.A.grace (line 4): " + kTooLong},
        {"handlers:\n  A:\n    lock: until_executed\n    lock_ttl: 4e7\n",
         "handlers.A.lock_ttl (line 4): " + kTooLong},
        {"handlers:\n  A:\n    lock: until_executed\n    lock_timeout: 4e7\n",
         "handlers.A.lock_timeout (line 4): " + kTooLong},
        {"handlers:\n  A:\n    throttle: {limit: 1, period: 31622401}\n",
         "handlers.A.throttle.period (line 3): " + kTooLong},
        {"handlers:\n  A:\n    fair_tenant_queues:\n      - {queue: q, threshold: 1, per: 4e7}\n",
         "handlers.A.fair_tenant_queues[0].per (line 4): " + kTooLong},
        // Far below the negative bound is out of range, not a wrapped value.
        {"handlers:\n  A:\n    exec: [/bin/true]\n    grace: -4e7\n",
         "handlers.A.grace (line 4): is out of range"},
    };
    for (const auto& c : cases) {
        INFO(c.yaml);
        CHECK(validation_error_of(c.yaml) == c.expected);
    }
}

TEST_CASE("durations at the bound load", "[config][durations]") {
    const auto config = kiqd::parse_config(
        "timeout: 31622400\ndead_timeout_in_seconds: 31622400\n"
        "handlers:\n  A:\n    exec: [/bin/true]\n    timeout: 31622400\n",
        "test.yml", "production");
    CHECK(config.timeout == std::chrono::seconds(31622400));
    REQUIRE(config.exec_handlers.size() == 1);
    CHECK(config.exec_handlers[0].timeout == std::chrono::seconds(31622400));
    CHECK(config.dead_timeout_seconds == 31622400);
}

TEST_CASE("redis.connect_timeout must be greater than 0", "[config][durations]") {
    CHECK(validation_error_of("redis:\n  connect_timeout: 0\n") ==
          "redis.connect_timeout (line 2): must be greater than 0");
}

TEST_CASE("deadlines saturate instead of wrapping into the past", "[durations]") {
    using namespace std::chrono;
    using kiqd::saturating_cast;
    using kiqd::saturating_deadline;
    const auto now = steady_clock::now();
    // What 9999999999 s did before: now + 1e19 ns wrapped to a time long past.
    CHECK(saturating_deadline(now, seconds(9999999999LL)) == steady_clock::time_point::max());
    CHECK(saturating_deadline(now, hours::max()) == steady_clock::time_point::max());
    CHECK(saturating_deadline(now, duration<double>(1e300)) == steady_clock::time_point::max());
    // Backwards: far into the past without wrapping forward, and the first instant at most.
    CHECK(saturating_deadline(now, duration<double>(-1e300)) < now);
    CHECK(saturating_deadline(steady_clock::time_point(seconds(-5)), duration<double>(-1e300)) ==
          steady_clock::time_point::min());
    CHECK(saturating_deadline(now, duration<double>(std::numeric_limits<double>::quiet_NaN())) ==
          now);
    // Ordinary durations are added exactly.
    CHECK(saturating_deadline(now, seconds(31622400)) == now + seconds(31622400));
    CHECK(saturating_deadline(now, milliseconds(-5)) == now - milliseconds(5));
    CHECK(saturating_deadline(now, duration<double>(0.25)) == now + milliseconds(250));
    // From the clock's last instant nothing more fits.
    CHECK(saturating_deadline(steady_clock::time_point::max(), nanoseconds(1)) ==
          steady_clock::time_point::max());
    CHECK(saturating_cast<milliseconds>(duration<double>(1e300)) == milliseconds::max());
    CHECK(saturating_cast<milliseconds>(duration<double>(1.5)) == milliseconds(1500));
}

TEST_CASE("a stop signal's wait of a huge duration still waits", "[durations]") {
    // Before, wait_for(1e12 s) added the duration to now unchecked and returned at once
    // (false: not stopped) instead of waiting; now it waits until the stop is requested.
    kiqd::StopSignal stop;
    std::atomic<pid_t> tid{0};
    std::atomic<bool> stopped{false};
    std::thread waiter([&] {
        tid = static_cast<pid_t>(::syscall(SYS_gettid));
        stopped = stop.wait_for(std::chrono::duration<double>(1e12));
    });
    // The stop is requested once the waiter sleeps in the kernel (state S in
    // /proc/self/task/<tid>/stat), i.e. inside the wait. A wait that returned at once never
    // gets there: its thread is gone, and this times out.
    REQUIRE(kiqd::test::wait_until([&] {
        const pid_t t = tid;
        if (t == 0) return false;
        std::ifstream stat("/proc/self/task/" + std::to_string(t) + "/stat");
        std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
        const size_t paren = text.rfind(')');
        return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'S';
    }));
    stop.request_stop();
    waiter.join();
    CHECK(stopped);
}
