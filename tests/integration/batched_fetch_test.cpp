// Batched fetch against a real Redis: reliable_fetch.batch_size moves N jobs per round trip
// into the working list and defers the acknowledgements of successes; basic fetch's opt-in
// `prefetch: N` pops N per round trip. Weighted shares stay those of one-at-a-time fetch, a
// clean stop puts every buffered and running job back, and with reliable fetch a kill -9 loses
// none of the buffered jobs.
#include <signal.h>

#include <catch2/catch.hpp>
#include <set>

#include "fetch/fetch_buffer.hpp"
#include "kiqd/client.hpp"
#include "server/orphan_recovery.hpp"
#include "server/processor.hpp"
#include "support/job_pushes.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/test_daemon_records.hpp"
#include "support/test_runtime.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using kiqd::test::KiqdProcess;
using kiqd::test::llen;
using kiqd::test::lrange;
using kiqd::test::only_member;
using kiqd::test::ran_count;
using kiqd::test::RedisServer;
using kiqd::test::TestRuntime;
using kiqd::test::wait_until;
using list_of = std::vector<std::string>;

namespace {

std::string noop(int i) {
    return kiqd::test::noop_payload("j" + std::to_string(i));
}

}  // namespace

TEST_CASE("batched fetch: weighted shares are those of one-at-a-time fetch", "[batch][reliable]") {
    auto& server = RedisServer::shared();
    server.flushall();
    const FetchMode mode = GENERATE(FetchMode::basic, FetchMode::reliable);
    const int batch = GENERATE(1, 50);
    TestRuntime t(server, {{"a", 3}, {"b", 1}}, 2, mode, batch);
    t.reliable();
    auto conn = server.connect();
    // Both queues stay non-empty for the whole test, so every fetch is a weighted draw.
    constexpr int kFetches = 20000;
    for (const char* q : {"a", "b"}) {
        redis::Command push{"LPUSH", std::string("queue:") + q};
        for (int i = 0; i < kFetches; ++i) push.push_back(std::string(q) + std::to_string(i));
        conn.command(push);
    }
    std::mt19937_64 rng(7);
    int from_a = 0;
    for (int i = 0; i < kFetches; ++i) {
        auto u = t.fetcher.retrieve_work(conn, rng, 0);
        REQUIRE(u);
        if (u->queue == "a") ++from_a;
        CHECK(u->payload.substr(0, 1) == u->queue);
    }
    // Expected share 3/4. A batch draws once per run of 5 jobs (prefix_fetch.hpp): 20,000
    // fetches are at least 4,000 draws, whose share has a standard deviation of 0.007, so
    // ±0.04 (over 5 sigma) fails only when the mix is really different — e.g. when a whole
    // batch came from one queue, the share would swing by whole batches.
    const double share = static_cast<double>(from_a) / kFetches;
    INFO("mode " << (mode == FetchMode::reliable ? "reliable" : "basic") << ", batch " << batch
                 << ": share of a = " << share);
    CHECK(share > 0.71);
    CHECK(share < 0.79);
    // Within one batch both queues occur (each job is its own draw), not 50 from one queue.
    if (batch > 1) {
        t.fetcher.take_buffered();  // drop what the loop above left in the buffer
        server.flushall();
        conn.command({"LPUSH", "queue:a", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8"});
        conn.command({"LPUSH", "queue:b", "b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8"});
        std::set<std::string> queues;
        auto first = t.fetcher.retrieve_work(conn, rng, 0);
        REQUIRE(first);
        queues.insert(first->queue);
        // One round trip took all 16 (50 asked for): the rest are buffered.
        CHECK(llen(conn, "queue:a") + llen(conn, "queue:b") == 0);
        for (const auto& u : t.fetcher.take_buffered()) queues.insert(u.queue);
        CHECK(queues == std::set<std::string>{"a", "b"});
    }
}

TEST_CASE("batched reliable fetch: jobs stay in the working list until their outcome is written",
          "[batch][reliable]") {
    auto& server = RedisServer::shared();
    server.flushall();
    TestRuntime t(server, {{"default", 0}}, 2, FetchMode::reliable, 5);
    t.reliable();
    auto conn = server.connect();
    for (int i = 1; i <= 8; ++i) conn.command({"LPUSH", "queue:default", noop(i)});
    Processor p(t.rt, 0, {});
    std::mt19937_64 rng(1);

    // One round trip moves five jobs; the queue keeps the other three.
    auto u = t.fetcher.retrieve_work(conn, rng, 0);
    REQUIRE(u);
    CHECK(u->payload == noop(1));
    CHECK(llen(conn, TestRuntime::kWorkingDefault) == 5);
    CHECK(llen(conn, "queue:default") == 3);
    p.process(conn, std::move(*u));
    for (int i = 2; i <= 5; ++i) {
        // From the buffer. Taking job 4 leaves one buffered (below 5/2), so that call refills
        // ahead: it sends the deferred acknowledgements of jobs 1-3 and moves jobs 6-8.
        u = t.fetcher.retrieve_work(conn, rng, 0);
        REQUIRE(u);
        CHECK(u->payload == noop(i));
        p.process(conn, std::move(*u));
    }
    CHECK(t.work.processed == 5);
    CHECK(llen(conn, "queue:default") == 0);
    // The jobs that ran but whose acknowledgements are deferred are still in the working list
    // (a crash now runs them again rather than losing them), with the buffered 6-8: the list is
    // 8 down to some k. Job 5's acknowledgement waits for this thread's next take, so k <= 5;
    // job 1's went out with the second refill at the latest, so k >= 2. (Where exactly depends
    // on the measured pace: at job 4 at the latest, when one buffered job is below 5/2, and
    // earlier when the pace says so; a refill at job 5 then carries 4's too.) All of them are
    // held by this process, not stranded.
    const auto working = lrange(conn, TestRuntime::kWorkingDefault);
    REQUIRE(working.size() >= 4);
    REQUIRE(working.size() <= 7);
    list_of eight_down;
    for (int i = 8; eight_down.size() < working.size(); --i) eight_down.push_back(noop(i));
    CHECK(working == eight_down);
    CHECK(t.reliable()->held_payloads().size() == working.size());
    OrphanRecovery recovery(t.rt, *t.reliable());
    CHECK(recovery.return_stranded(conn, std::chrono::seconds(0)) == 0);
    CHECK(llen(conn, TestRuntime::kWorkingDefault) == static_cast<long long>(working.size()));

    // Job 6 runs; taking job 7 leaves one buffered, and that refill (the queue is empty now)
    // carries every acknowledgement left, up to job 6's.
    u = t.fetcher.retrieve_work(conn, rng, 0);
    REQUIRE(u);
    CHECK(u->payload == noop(6));
    p.process(conn, std::move(*u));
    u = t.fetcher.retrieve_work(conn, rng, 0);
    REQUIRE(u);
    CHECK(u->payload == noop(7));
    CHECK(lrange(conn, TestRuntime::kWorkingDefault) == list_of{noop(8), noop(7)});

    // Stopping: job 7 is running (the manager requeues it at the deadline); job 8 is buffered
    // and goes back to the front of the queue.
    conn.pipeline(t.fetcher.release_commands());
    CHECK(lrange(conn, "queue:default") == list_of{noop(8)});
    CHECK(lrange(conn, TestRuntime::kWorkingDefault) == list_of{noop(7)});
    CHECK(t.fetcher.take_buffered().empty());
}

TEST_CASE("batched reliable fetch: a failure is recorded with its acknowledgement at once",
          "[batch][reliable]") {
    auto& server = RedisServer::shared();
    server.flushall();
    TestRuntime t(server, {{"default", 0}}, 2, FetchMode::reliable, 10);
    t.reliable();
    auto conn = server.connect();
    Client client(t.keys, Compat::v6);
    client.push(conn, {{"class", "Kiqd::Fail"}, {"args", {"kaboom"}}, {"retry", 5}});
    Processor p(t.rt, 0, {});
    std::mt19937_64 rng(1);
    auto u = t.fetcher.retrieve_work(conn, rng, 0);
    REQUIRE(u);
    p.process(conn, std::move(*u));
    CHECK(kiqd::test::zcard(conn, "retry") == 1);
    CHECK(llen(conn, TestRuntime::kWorkingDefault) ==
          0);  // outcome and LREM in one MULTI, not deferred
}

TEST_CASE("prefetch: basic fetch pops N per round trip and a stop puts the buffer back",
          "[batch][fetch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    TestRuntime t(server, {{"default", 0}}, 2, FetchMode::basic, 4);
    auto conn = server.connect();
    for (int i = 1; i <= 6; ++i) conn.command({"LPUSH", "queue:default", noop(i)});
    std::mt19937_64 rng(1);
    auto u = t.fetcher.retrieve_work(conn, rng, 0);
    REQUIRE(u);
    CHECK(u->payload == noop(1));
    CHECK(llen(conn, "queue:default") == 2);  // four popped, one handed out, three buffered
    u = t.fetcher.retrieve_work(conn, rng, 0);
    REQUIRE(u);
    CHECK(u->payload == noop(2));
    conn.pipeline(t.fetcher.release_commands());
    CHECK(lrange(conn, "queue:default") == list_of{noop(6), noop(5), noop(4), noop(3)});
}

TEST_CASE("batched fetch daemon: SIGTERM puts every buffered and running job back, in order",
          "[batch][reliable][daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    const bool reliable = GENERATE(true, false);
    kiqd::test::push_copies(conn, {{"class", "Kiqd::Sleep"}, {"args", {60}}}, 20);
    const auto original = lrange(conn, "queue:default");
    REQUIRE(original.size() == 20);
    KiqdProcess kiqd(
        KIQD_BINARY,
        kiqd::test::kiqd_config(server,
                                std::string("concurrency: 2\ntimeout: 1\nqueues: [default]\n") +
                                    (reliable ? "fetch: reliable\nreliable_fetch: {batch_size: 8}\n"
                                              : "prefetch: 8\n")));
    // Two jobs running, six buffered, twelve still queued.
    REQUIRE(wait_until([&] { return llen(conn, "queue:default") == 12; }));
    REQUIRE(wait_until(
        [&] {
            const auto identity = only_member(conn, "processes");
            return identity && conn.command({"HLEN", *identity + ":workers"}).integer() == 2;
        },
        std::chrono::seconds(30)));
    CHECK(kiqd.stop() == 0);
    // Byte for byte, and in the original order: the running two (fetched first) at the very
    // front again (between themselves in thread order, as Sidekiq's bulk requeue), then the
    // buffered six, then the never-fetched twelve. LRANGE lists the back of the queue first.
    const auto now = lrange(conn, "queue:default");
    REQUIRE(now.size() == original.size());
    CHECK(list_of(now.begin(), now.end() - 2) == list_of(original.begin(), original.end() - 2));
    CHECK(std::set<std::string>(now.end() - 2, now.end()) ==
          std::set<std::string>(original.end() - 2, original.end()));
    CHECK(conn.command({"SCARD", "kiqd:reliable:working"}).integer() == 0);
}

TEST_CASE("batched reliable fetch daemon: kill -9 with jobs buffered loses none of them",
          "[batch][reliable][daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    constexpr int kJobs = 100;
    // The first job holds the only thread long enough for the kill; the rest are quick.
    kiqd::test::push_jobs(conn, kJobs, [](int i) {
        return nlohmann::ordered_json{{"class", "Test::Record"}, {"args", {i == 0 ? 5 : 0}}};
    });
    const std::string yaml = kiqd::test::kiqd_config(
        server,
        "concurrency: 1\nlogging: {level: warn}\nqueues: [default]\nfetch: reliable\n"
        "reliable_fetch: {batch_size: 50, liveness_ttl: 3, orphan_check_interval: 1}\n");
    std::string victim_list;
    {
        KiqdProcess victim(KIQD_TEST_DAEMON, yaml);
        // One refill moved 50 jobs: one running (sleeping), 49 in the local buffer only.
        REQUIRE(wait_until([&] {
            const auto working = only_member(conn, "kiqd:reliable:working");
            if (!working) return false;
            victim_list = *working;
            return llen(conn, victim_list) == 50;
        }));
        CHECK(ran_count(conn) == 0);
        victim.signal(SIGKILL);
        CHECK(victim.wait_exit() == 128 + SIGKILL);
    }
    CHECK(llen(conn, victim_list) == 50);
    KiqdProcess successor(KIQD_TEST_DAEMON, yaml);
    REQUIRE(wait_until(
        [&] {
            return llen(conn, "queue:default") == 0 && llen(conn, victim_list) == 0 &&
                   ran_count(conn) >= kJobs;
        },
        std::chrono::seconds(60)));
    CHECK(successor.stop() == 0);
    const auto jids = kiqd::test::jids_of(kiqd::test::ran_records(conn));
    CHECK(jids.size() == static_cast<size_t>(kJobs));
    CHECK(conn.command({"SCARD", "kiqd:reliable:working"}).integer() == 0);
}
