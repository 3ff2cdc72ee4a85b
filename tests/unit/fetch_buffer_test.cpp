// FetchBuffer without Redis: the refill is a function here, so these tests pin down the
// buffer's own rules — every job handed out once, refills in flight bounded, more than one in
// flight when the round trip is slow, acknowledgements kept when a refill fails.
#include "fetch/fetch_buffer.hpp"

#include <atomic>
#include <catch2/catch.hpp>
#include <set>
#include <stdexcept>
#include <thread>

namespace {

using kiqd::FetchBuffer;
using kiqd::UnitOfWork;

struct DrainResult {
    std::multiset<std::string> taken;
    int peak_in_flight = 0;
};

// `consumers` threads take jobs until the source of `total` jobs is drained; each refill hands
// out up to `batch` of them after a simulated round trip of `round_trip`.
DrainResult drain(FetchBuffer& buffer, int total, size_t batch, int consumers,
                  std::chrono::microseconds round_trip) {
    std::atomic<int> next{0}, in_flight{0}, peak{0};
    auto refill = [&](std::vector<UnitOfWork>&) {
        const int now = ++in_flight;
        for (int p = peak.load(); now > p && !peak.compare_exchange_weak(p, now);) {
        }
        std::this_thread::sleep_for(round_trip);  // the link under test, not a wait for a condition
        std::vector<UnitOfWork> got;
        for (size_t i = 0; i < batch; ++i) {
            const int n = next++;
            if (n >= total) break;
            got.push_back({"default", "job-" + std::to_string(n)});
        }
        --in_flight;
        return got;
    };
    std::mutex taken_mutex;
    DrainResult result;
    std::vector<std::thread> threads;
    for (int t = 0; t < consumers; ++t)
        threads.emplace_back([&] {
            for (;;) {
                bool drained = false;
                auto unit = buffer.take_or_refill(refill, std::chrono::seconds(5), drained);
                if (unit) {
                    std::lock_guard lock(taken_mutex);
                    result.taken.insert(unit->payload);
                } else if (drained) {
                    return;
                }
            }
        });
    for (auto& t : threads) t.join();
    result.peak_in_flight = peak.load();
    return result;
}

void require_each_once(const DrainResult& r, int total) {
    REQUIRE(r.taken.size() == static_cast<size_t>(total));
    REQUIRE(std::set<std::string>(r.taken.begin(), r.taken.end()).size() ==
            static_cast<size_t>(total));
}

}  // namespace

TEST_CASE("fetch buffer: a slow round trip gets several refills in flight, never more than allowed",
          "[unit][batch]") {
    // Consumers take jobs in microseconds and a refill lasts 2 ms, so one refill in flight
    // supplies ~50 jobs per refill time: the measured pace asks for 3 × 50 ahead.
    FetchBuffer buffer(50, 4);
    const auto r = drain(buffer, 5000, 50, 6, std::chrono::milliseconds(2));
    require_each_once(r, 5000);
    CHECK(r.peak_in_flight >= 2);
    CHECK(r.peak_in_flight <= 4);
    CHECK(buffer.buffered() == 0);
    CHECK(buffer.refills_in_flight() == 0);
}

TEST_CASE("fetch buffer: with max_refills 1, refills never overlap", "[unit][batch]") {
    FetchBuffer buffer(50, 1);
    const auto r = drain(buffer, 3000, 50, 6, std::chrono::milliseconds(1));
    require_each_once(r, 3000);
    CHECK(r.peak_in_flight == 1);
}

TEST_CASE("fetch buffer: a failed refill keeps the deferred acknowledgements for the next one",
          "[unit][batch]") {
    FetchBuffer buffer(10, 2);
    buffer.defer_ack({"default", "a"});
    buffer.defer_ack({"default", "b"});
    bool drained = false;
    auto failing = [](std::vector<UnitOfWork>& acks) -> std::vector<UnitOfWork> {
        REQUIRE(acks.size() == 2);
        throw std::runtime_error("connection lost");
    };
    REQUIRE_THROWS_AS(buffer.take_or_refill(failing, std::chrono::seconds(1), drained),
                      std::runtime_error);
    CHECK(buffer.refills_in_flight() == 0);
    std::vector<std::string> sent;
    auto working = [&](std::vector<UnitOfWork>& acks) {
        for (const auto& a : acks) sent.push_back(a.payload);
        return std::vector<UnitOfWork>{{"default", "j1"}, {"default", "j2"}};
    };
    auto unit = buffer.take_or_refill(working, std::chrono::seconds(1), drained);
    REQUIRE(unit);
    CHECK(unit->payload == "j1");
    CHECK(sent == std::vector<std::string>{"a", "b"});
    CHECK(buffer.take_acks().empty());
    CHECK(buffer.take_buffered().size() == 1);
}
