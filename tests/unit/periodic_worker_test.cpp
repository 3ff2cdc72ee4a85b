#include "common/periodic_worker.hpp"

#include <spdlog/sinks/ostream_sink.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <sstream>
#include <stdexcept>

#include "support/wait_until.hpp"

using namespace std::chrono_literals;
using kiqd::test::wait_until;

namespace {

// A worker named "test-worker" whose log lines land in `out`, and a round that counts itself.
struct WorkerFixture {
    std::ostringstream out;
    spdlog::logger log{"test", std::make_shared<spdlog::sinks::ostream_sink_mt>(out)};
    kiqd::PeriodicWorker worker{"test-worker", log};
    std::atomic<int> rounds{0};
    kiqd::PeriodicWorker::Round count = [this] { ++rounds; };
};

}  // namespace

TEST_CASE("periodic worker: rounds follow the interval until stop; stop joins once",
          "[periodic_worker]") {
    WorkerFixture f;
    f.worker.start(0ms, 10ms, f.count);
    REQUIRE(wait_until([&] { return f.rounds >= 3; }));
    CHECK(f.worker.stop());
    const int after_stop = f.rounds;
    CHECK_FALSE(f.worker.stop());  // idempotent
    std::this_thread::sleep_for(30ms);
    CHECK(f.rounds == after_stop);
    f.worker.start(0ms, 10ms, f.count);  // a stopped worker starts nothing
    CHECK_FALSE(f.worker.stop());
    CHECK(f.rounds == after_stop);
}

TEST_CASE("periodic worker: with no first wait the first round runs even if stop came first",
          "[periodic_worker]") {
    WorkerFixture f;
    f.worker.start(0ms, 1h, f.count);
    CHECK(f.worker.stop());
    CHECK(f.rounds == 1);
}

TEST_CASE("periodic worker: a first wait delays the first round; stop ends the wait at once",
          "[periodic_worker]") {
    WorkerFixture f;
    f.worker.start(1h, 1h, f.count);
    const auto before = std::chrono::steady_clock::now();
    CHECK(f.worker.stop());
    CHECK(std::chrono::steady_clock::now() - before < 5s);
    CHECK(f.rounds == 0);
}

TEST_CASE("periodic worker: wake() cuts the wait short; the interval is asked after each round",
          "[periodic_worker]") {
    WorkerFixture f;
    std::atomic<int> asked{0};
    f.worker.start(
        0ms,
        [&] {
            ++asked;
            return kiqd::PeriodicWorker::Duration(1h);
        },
        f.count);
    REQUIRE(wait_until([&] { return asked == 1; }));
    CHECK(f.rounds == 1);
    f.worker.wake();
    REQUIRE(wait_until([&] { return f.rounds == 2 && asked == 2; }));
    f.worker.stop();
}

TEST_CASE("periodic worker: a round that throws is logged and the next round follows",
          "[periodic_worker]") {
    WorkerFixture f;
    f.worker.start(0ms, 5ms, [&] {
        if (++f.rounds == 1) throw std::runtime_error("boom");
        if (f.rounds == 2) throw 42;
    });
    REQUIRE(wait_until([&] { return f.rounds >= 3; }));
    f.worker.stop();
    CHECK_THAT(f.out.str(), Catch::Contains("test-worker: round failed: boom"));
    CHECK_THAT(f.out.str(), Catch::Contains("test-worker: round failed: unknown exception"));
}
