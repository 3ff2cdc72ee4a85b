// FetchBuffer without Redis: the refill is a function here, so these tests pin down the
// buffer's own rules — every job handed out once, refills in flight bounded, more than one in
// flight when the round trip is slow, acknowledgements kept when a refill fails.
#include "fetch/fetch_buffer.hpp"

#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <mutex>
#include <optional>
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

namespace {

// A scripted source: the first refill hands out `first` jobs, later ones nothing, until armed;
// the armed refill waits for `open` and then hands out `second` jobs.
struct Script {
    std::mutex mutex;
    std::condition_variable cv;
    bool armed = false, open = false, in_gate = false;
    int next = 0, first = 0, second = 0;
    std::vector<UnitOfWork> jobs(int n) {
        std::vector<UnitOfWork> out;
        for (int i = 0; i < n; ++i) out.push_back({"default", "job-" + std::to_string(next++)});
        return out;
    }
    FetchBuffer::Refill refill() {
        return [this](std::vector<UnitOfWork>&) {
            std::unique_lock lock(mutex);
            if (next == 0) return jobs(first);
            if (!armed) return std::vector<UnitOfWork>{};
            armed = false;
            in_gate = true;
            cv.notify_all();
            cv.wait(lock, [&] { return open; });
            return jobs(second);
        };
    }
};

// Waits (bounded) for `done`; a condition, not a sleep-then-assert.
template <typename F>
bool await(F done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done()) {
        if (std::chrono::steady_clock::now() > until) return false;
        std::this_thread::yield();
    }
    return true;
}

}  // namespace

TEST_CASE(
    "fetch buffer: with waiters about, a thread of short jobs takes a pile; others steal "
    "the newer half; a stop gets every piled job and acknowledgement back",
    "[unit][batch]") {
    FetchBuffer buffer(40, 1, 3);
    Script script;
    script.first = 40;
    script.second = 40;
    const auto refill = script.refill();
    const auto must_not_refill = [](std::vector<UnitOfWork>&) -> std::vector<UnitOfWork> {
        FAIL("refill called while jobs were piled");
        return {};
    };
    bool drained = false;
    // Slot 0's thread takes 40 jobs at once, alone: its jobs measure short, nobody waits, so no
    // pile. Then it refills (the refill waits at the gate) straight away: the time from its last
    // take to this one counts as its last job's, so no thread start or assertion may come in
    // between (under ASan a thread start alone made that "job" long enough to shrink the pile).
    // Catch's assertions are not thread-safe: the thread records, the test checks after.
    std::vector<std::string> taken, held_before;
    size_t buffered_before = 0;
    std::optional<UnitOfWork> first, woken;
    std::thread refiller([&] {
        bool d = false;
        for (int i = 0; i < 40; ++i) {
            auto unit = buffer.take_or_refill(refill, std::chrono::seconds(5), d, 0);
            if (!unit) break;
            taken.push_back(unit->payload);
            buffer.defer_ack(std::move(*unit), 0);
        }
        buffered_before = buffer.buffered();
        held_before = buffer.held_payloads();
        {
            std::lock_guard lock(script.mutex);
            script.armed = true;
        }
        first = buffer.take_or_refill(refill, std::chrono::seconds(5), d, 0);
    });
    {
        std::unique_lock lock(script.mutex);
        script.cv.wait(lock, [&] { return script.in_gate; });
    }
    // (CHECK, not REQUIRE: the refiller is still running and must be joined below.)
    CHECK(taken.size() == 40);
    for (size_t i = 0; i < taken.size(); ++i) CHECK(taken[i] == "job-" + std::to_string(i));
    CHECK(buffered_before == 0);
    // The refills ahead (empty here) sent the acknowledgements; the last one is the thread's
    // own until it next takes from the shared buffer, and held meanwhile.
    CHECK(held_before == std::vector<std::string>{"job-39"});

    // Slot 1 waits for the refill in the gate.
    std::thread waiter([&] {
        bool d = false;
        woken = buffer.take_or_refill(refill, std::chrono::seconds(5), d, 1);
    });
    REQUIRE(await([&] { return buffer.waiting() == 1; }));
    {
        std::lock_guard lock(script.mutex);
        script.open = true;
    }
    script.cv.notify_all();
    refiller.join();
    waiter.join();
    // The refill sent slot 0's acknowledgements; both threads got a job, and the 38 others are
    // in the piles (slot 0 took a pile: a waiter was about) and the shared buffer.
    REQUIRE(first);
    REQUIRE(woken);
    CHECK(first->payload == "job-40");
    CHECK(buffer.take_acks().empty());
    CHECK(buffer.buffered() == 38);
    const size_t piled = buffer.piled();
    CHECK(piled >= 2);  // slot 0's pile, and slot 1's if its jobs measured short
    CHECK(buffer.waiting() == 0);

    // Slot 0 runs its pile next, in fetch order, without a refill.
    auto next = buffer.take_or_refill(must_not_refill, std::chrono::seconds(5), drained, 0);
    REQUIRE(next);
    CHECK(next->payload == "job-41");
    CHECK(buffer.piled() == piled - 1);

    // Slot 2 takes what the shared buffer holds (refilling ahead finds nothing more), then steals
    // from the piles instead of waiting: every job comes out exactly once.
    std::set<std::string> seen{first->payload, woken->payload, next->payload};
    while (buffer.buffered() > 0) {
        auto unit = buffer.take_or_refill(refill, std::chrono::seconds(5), drained, 2);
        REQUIRE(unit);
        CHECK(seen.insert(unit->payload).second);
        if (seen.size() == 20) break;  // leave some piled for the stop below
    }

    // A stop: a thread's acknowledgement not yet shared and every piled job come back. Slot 1's
    // acknowledgement is deferred unless its job counts as long (5 ms or more since its take, on a
    // thread whose jobs are not short: under ASan on a busy machine it can), and then nothing is
    // recorded and the caller acknowledges it itself.
    const bool deferred = buffer.defer_ack({"default", "done-1"}, 1);
    const size_t left = buffer.buffered();
    CHECK(buffer.held_payloads().size() == left + (deferred ? 1 : 0));
    auto back = buffer.take_buffered();
    CHECK(back.size() == left);
    for (const auto& u : back) CHECK(seen.insert(u.payload).second);
    CHECK(seen.size() == 40);  // jobs 40..79, none twice
    auto acks = buffer.take_acks();
    REQUIRE(acks.size() == (deferred ? 1u : 0u));
    if (deferred) CHECK(acks[0].payload == "done-1");
    CHECK(buffer.buffered() == 0);
    CHECK(buffer.held_payloads().empty());
}

TEST_CASE("fetch buffer: of the threads waiting for a refill, the one that parked last wakes first",
          "[unit][batch]") {
    // Batch 1 (no refill ahead: the low-water mark is 0), piles for 3 slots. Slot 0's refill
    // waits at a gate and then hands out 2 jobs: slot 0 takes one, and one waiter is woken for
    // the other. Slots 1 and 2 park in that order, so slot 2 is the one woken; slot 1 stays
    // parked until the next refill. (Newest first keeps the same few threads warm at c100.)
    FetchBuffer buffer(1, 1, 3);
    std::mutex mutex;
    std::condition_variable cv;
    bool open = false, in_gate = false;
    int next = 0;
    auto make = [&](int n) {
        std::vector<UnitOfWork> out;
        for (int i = 0; i < n; ++i) out.push_back({"default", "job-" + std::to_string(next++)});
        return out;
    };
    const FetchBuffer::Refill gated = [&](std::vector<UnitOfWork>&) {
        std::unique_lock lock(mutex);
        in_gate = true;
        cv.notify_all();
        cv.wait(lock, [&] { return open; });
        return make(2);
    };
    const FetchBuffer::Refill one = [&](std::vector<UnitOfWork>&) {
        std::lock_guard lock(mutex);
        return make(1);
    };
    std::optional<UnitOfWork> got0, got1, got2;
    std::thread t0([&] {
        bool d = false;
        got0 = buffer.take_or_refill(gated, std::chrono::seconds(30), d, 0);
    });
    {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return in_gate; });
    }
    std::thread t1([&] {
        bool d = false;
        got1 = buffer.take_or_refill(one, std::chrono::seconds(30), d, 1);
    });
    const bool one_parked = await([&] { return buffer.waiting() == 1; });
    std::thread t2([&] {
        bool d = false;
        got2 = buffer.take_or_refill(one, std::chrono::seconds(30), d, 2);
    });
    const bool two_parked = await([&] { return buffer.waiting() == 2; });
    {
        std::lock_guard lock(mutex);
        open = true;
    }
    cv.notify_all();
    t0.join();
    t2.join();  // slot 2 parked last: it is the one woken for the second job
    const size_t still_waiting = buffer.waiting();
    // Slot 0 (no slot now) refills again: one job, taken by itself; with nothing left and no
    // refill in flight one waiter wakes to refill for itself, which releases slot 1.
    bool drained = false;
    auto mine = buffer.take_or_refill(one, std::chrono::seconds(30), drained);
    t1.join();
    REQUIRE(one_parked);
    REQUIRE(two_parked);
    REQUIRE(got0);
    REQUIRE(got2);
    CHECK(got0->payload == "job-0");
    CHECK(got2->payload == "job-1");
    CHECK(still_waiting == 1);
    REQUIRE(mine);
    CHECK(mine->payload == "job-2");
    REQUIRE(got1);
    CHECK(got1->payload == "job-3");
    CHECK(buffer.waiting() == 0);
}

TEST_CASE("fetch buffer: a job taken outside the buffer counts toward the thread's pace",
          "[unit][batch]") {
    // After an idle spell a thread's job comes from the blocking pop, not from the buffer. Its
    // next take must measure it: the refill it then makes sees the thread's jobs as short
    // (piles, locks and slots taken ahead), instead of as unmeasured.
    FetchBuffer buffer(4, 1, 2);
    const FetchBuffer::Refill empty = [](std::vector<UnitOfWork>&) {
        return std::vector<UnitOfWork>{};
    };
    auto short_at_refill = [&](size_t slot) {
        bool seen = false;
        const FetchBuffer::Refill refill = [&](std::vector<UnitOfWork>&) {
            seen = buffer.short_jobs(slot);
            return std::vector<UnitOfWork>{{"default", "job"}};
        };
        bool drained = false;
        REQUIRE(buffer.take_or_refill(refill, std::chrono::seconds(5), drained, slot));
        return seen;
    };
    bool drained = false;
    for (size_t slot : {0, 1}) {
        CHECK_FALSE(buffer.take_or_refill(empty, std::chrono::seconds(5), drained, slot));
        CHECK(drained);  // every queue empty: the thread blocks on one
    }
    buffer.note_taken(0);  // slot 0's blocking pop returned a job; slot 1's timed out
    CHECK(short_at_refill(0));
    CHECK_FALSE(short_at_refill(1));
}

TEST_CASE("fetch buffer: a thread's refills acquire ahead only once its jobs are measured",
          "[unit][batch]") {
    // A thread's first take has no pace: what its refill would acquire ahead could be held
    // behind a long first job. From the next take on, short jobs do.
    FetchBuffer buffer(4, 1, 1);
    std::vector<bool> ahead;
    const FetchBuffer::Refill refill = [&](std::vector<UnitOfWork>&) {
        ahead.push_back(buffer.acquires_ahead(0));
        return std::vector<UnitOfWork>{{"default", "job"}};
    };
    bool drained = false;
    for (int i = 0; i < 2; ++i)
        REQUIRE(buffer.take_or_refill(refill, std::chrono::seconds(5), drained, 0));
    CHECK(ahead == std::vector<bool>{false, true});
}

TEST_CASE(
    "fetch buffer: a job that ran kAckDelay or longer is not deferred, and the ack watcher is "
    "woken by the first deferral after it went idle",
    "[unit][batch][ack]") {
    FetchBuffer buffer(10, 1, 2);
    int wakes = 0;
    buffer.set_ack_watcher([&] { ++wakes; });
    CHECK(buffer.ack_watcher_idle());  // nothing deferred: it may sleep
    CHECK_FALSE(buffer.oldest_ack());
    auto refill = [](std::vector<UnitOfWork>&) {
        return std::vector<UnitOfWork>{{"default", "j1"}, {"default", "j2"}};
    };
    bool drained = false;
    auto first = buffer.take_or_refill(refill, std::chrono::seconds(1), drained, 0);
    REQUIRE(first);
    // The job's run, longer than the deferral bound: its acknowledgement is the caller's to send.
    std::this_thread::sleep_for(FetchBuffer::kAckDelay + std::chrono::milliseconds(1));
    CHECK_FALSE(buffer.defer_ack(*first, 0));
    CHECK_FALSE(buffer.oldest_ack());
    CHECK(wakes == 0);
    // A job without a measured start (no slot) is deferred, and wakes the idle watcher once.
    CHECK(buffer.defer_ack({"default", "a"}));
    CHECK(wakes == 1);
    const auto oldest = buffer.oldest_ack();
    REQUIRE(oldest);
    CHECK(buffer.defer_ack({"default", "b"}));
    CHECK(wakes == 1);
    CHECK(buffer.oldest_ack() == oldest);    // the oldest, not the newest
    CHECK_FALSE(buffer.ack_watcher_idle());  // acknowledgements wait: it must not sleep
    CHECK(buffer.take_acks().size() == 2);
    CHECK(buffer.ack_watcher_idle());
    // Acknowledgements given back after a failed write wake it too.
    buffer.restore_acks({{"default", "a"}});
    CHECK(wakes == 2);
    CHECK(buffer.oldest_ack());
}
