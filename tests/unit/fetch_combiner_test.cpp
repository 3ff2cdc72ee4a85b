// FetchCombiner without Redis: the fetch is a function here, so these tests pin down the
// combiner's own rules — the threads that ask while a call is in flight share the next call,
// one job each; never more jobs asked for than threads waiting; every job handed out once; a
// short reply leaves the rest with nothing; a failed call fails its leader only.
#include "fetch/fetch_combiner.hpp"

#include <catch2/catch.hpp>
#include <condition_variable>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "support/wait_until.hpp"

namespace {

using kiqd::FetchCombiner;
using kiqd::UnitOfWork;

// A fetch whose first `gated` calls block until the test opens the gate, and which records how
// many jobs each call asked for. Call k hands out min(count, limit) jobs named "k-i".
struct GatedFetch {
    std::mutex mutex;
    std::condition_variable cv;
    bool open = false;
    size_t gated = 1;
    size_t entered_calls = 0;
    std::vector<size_t> asked;
    size_t limit = 1000;
    bool fail_second = false;

    std::vector<UnitOfWork> operator()(size_t count) {
        std::unique_lock lock(mutex);
        const size_t call = asked.size();
        asked.push_back(count);
        if (call < gated) {
            ++entered_calls;
            cv.notify_all();
            cv.wait(lock, [&] { return open; });
        }
        if (call == 1 && fail_second) throw std::runtime_error("connection lost");
        std::vector<UnitOfWork> got;
        for (size_t i = 0; i < std::min(count, limit); ++i)
            got.push_back({"default", std::to_string(call) + "-" + std::to_string(i)});
        return got;
    }
    void release() {
        std::lock_guard lock(mutex);
        open = true;
        cv.notify_all();
    }
    size_t entered() {
        std::lock_guard lock(mutex);
        return entered_calls;
    }
};

struct Outcome {
    std::mutex mutex;
    std::multiset<std::string> jobs;
    int empty = 0;
    int failed = 0;
};

std::thread taker(FetchCombiner& combiner, GatedFetch& fetch, Outcome& out) {
    return std::thread([&] {
        try {
            auto unit = combiner.take([&](size_t count) { return fetch(count); });
            std::lock_guard lock(out.mutex);
            if (unit)
                out.jobs.insert(unit->payload);
            else
                ++out.empty;
        } catch (const std::runtime_error&) {
            std::lock_guard lock(out.mutex);
            ++out.failed;
        }
    });
}

// `fetch.gated` threads' calls in flight (gated), then `others` threads that ask meanwhile.
void start_round(FetchCombiner& combiner, GatedFetch& fetch, Outcome& out,
                 std::vector<std::thread>& threads, size_t others) {
    for (size_t i = 0; i < fetch.gated; ++i) {
        threads.push_back(taker(combiner, fetch, out));
        REQUIRE(kiqd::test::wait_until([&] { return fetch.entered() == i + 1; }));
    }
    for (size_t i = 0; i < others; ++i) threads.push_back(taker(combiner, fetch, out));
    REQUIRE(kiqd::test::wait_until([&] { return combiner.joined() == others; }));
}

// start_round, then the gate opens and every thread finishes.
void run_round(FetchCombiner& combiner, GatedFetch& fetch, Outcome& out, size_t others) {
    std::vector<std::thread> threads;
    start_round(combiner, fetch, out, threads, others);
    fetch.release();
    for (auto& t : threads) t.join();
}

}  // namespace

TEST_CASE("fetch combiner: threads that ask during a call share the next one",
          "[fetch][fair_fetch]") {
    FetchCombiner combiner(64, 1);
    GatedFetch fetch;
    Outcome out;
    run_round(combiner, fetch, out, 5);
    // Two calls for six threads: the first for its own thread, the second for the five others.
    REQUIRE(fetch.asked == std::vector<size_t>{1, 5});
    REQUIRE(combiner.rounds() == 2);
    REQUIRE(combiner.handed() == 6);
    REQUIRE(out.jobs == std::multiset<std::string>{"0-0", "1-0", "1-1", "1-2", "1-3", "1-4"});
    REQUIRE(out.empty == 0);
}

TEST_CASE("fetch combiner: a round never asks for more than max_round jobs",
          "[fetch][fair_fetch]") {
    FetchCombiner combiner(2, 1);
    GatedFetch fetch;
    Outcome out;
    std::vector<std::thread> threads;
    threads.push_back(taker(combiner, fetch, out));
    REQUIRE(kiqd::test::wait_until([&] { return fetch.entered() == 1; }));
    for (int i = 0; i < 4; ++i) threads.push_back(taker(combiner, fetch, out));
    fetch.release();
    for (auto& t : threads) t.join();
    size_t asked = 0;
    for (size_t a : fetch.asked) {
        REQUIRE(a <= 2);
        asked += a;
    }
    REQUIRE(asked == 5);
    REQUIRE(out.jobs.size() == 5);
    REQUIRE(std::set<std::string>(out.jobs.begin(), out.jobs.end()).size() == 5);
}

TEST_CASE("fetch combiner: a short reply leaves the other threads empty-handed",
          "[fetch][fair_fetch]") {
    FetchCombiner combiner(64, 1);
    GatedFetch fetch;
    fetch.limit = 2;  // the queues hold two jobs for the second round's four threads
    Outcome out;
    run_round(combiner, fetch, out, 4);
    REQUIRE(fetch.asked == std::vector<size_t>{1, 4});
    REQUIRE(out.jobs == std::multiset<std::string>{"0-0", "1-0", "1-1"});
    REQUIRE(out.empty == 2);
    REQUIRE(combiner.handed() == 3);
}

TEST_CASE("fetch combiner: a failed call throws in its leader, the others get nothing",
          "[fetch][fair_fetch]") {
    FetchCombiner combiner(64, 1);
    GatedFetch fetch;
    fetch.fail_second = true;
    Outcome out;
    run_round(combiner, fetch, out, 3);
    REQUIRE(out.jobs == std::multiset<std::string>{"0-0"});
    REQUIRE(out.failed == 1);
    REQUIRE(out.empty == 2);
    // The combiner still works after a failure.
    auto unit = combiner.take([&](size_t count) { return fetch(count); });
    REQUIRE(unit);
    REQUIRE(unit->payload == "2-0");
}

TEST_CASE("fetch combiner: two calls in flight, then the threads that asked share the third",
          "[fetch][fair_fetch]") {
    FetchCombiner combiner(64);  // kMaxInFlight: 2
    REQUIRE(FetchCombiner::kMaxInFlight == 2);
    GatedFetch fetch;
    fetch.gated = 2;
    Outcome out;
    run_round(combiner, fetch, out, 4);
    REQUIRE(fetch.asked == std::vector<size_t>{1, 1, 4});
    REQUIRE(out.jobs == std::multiset<std::string>{"0-0", "1-0", "2-0", "2-1", "2-2", "2-3"});
    REQUIRE(combiner.handed() == 6);
}
