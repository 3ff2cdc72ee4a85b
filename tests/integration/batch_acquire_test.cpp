// What a batched reliable refill acquires ahead of the middlewares (src/fetch/refill_acquirer.hpp,
// src/middleware/batch_acquire.hpp), against a real Redis, in-process: a ReliableFetcher with a
// BatchAcquire, its refills taken with retrieve_work, and the jobs run through the real
// middlewares with what they carry. Covers a limit reached inside one refill, duplicates inside
// one refill, a claimed slot or lock (no acquire of its own, released after the run), and jobs
// acquired then given back at stop (every slot and lock released); then a daemon with batched
// reliable fetch under a limit, stopped with jobs buffered.
#include "middleware/batch_acquire.hpp"

#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "fetch/refill_acquirer.hpp"
#include "middleware/fair_tenant.hpp"
#include "middleware/limits/concurrency_limit.hpp"
#include "middleware/limits/concurrency_scripts.hpp"
#include "middleware/unique/lock_survey.hpp"
#include "middleware/unique/unique_jobs.hpp"
#include "support/job_pushes.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/test_daemon_records.hpp"
#include "support/test_runtime.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using kiqd::test::held_lock_count;
using kiqd::test::held_locks;
using kiqd::test::KiqdProcess;
using kiqd::test::llen;
using kiqd::test::RedisServer;
using kiqd::test::TestRuntime;
using kiqd::test::zcard;
using kiqd::test::zrange;

namespace {

std::string job(const std::string& cls, const std::string& jid, const std::string& arg) {
    return R"({"class":")" + cls + R"(","queue":"default","args":[")" + arg + R"("],"jid":")" +
           jid + R"("})";
}

struct Fixture {
    explicit Fixture(RedisServer& server)
        : t(server, {{"default", 0}}, 4, FetchMode::reliable, 50),
          locks(t.keys, server.options(), std::chrono::seconds(60), TestRuntime::kIdentity, *t.log),
          slots(t.keys, server.options(), ConcurrencyLimitsConfig{}, TestRuntime::kIdentity,
                *t.log),
          conn(server.connect()) {
        t.config.classes["Limited"].concurrency_limit = ConcurrencySpec{2, LimitScope::job_class};
        t.config.classes["Uniq"].lock.lock = "while_executing";
        t.config.classes["Waits"].lock.lock = "until_and_while_executing";
        t.config.classes["Wide"].concurrency_limit = ConcurrencySpec{1100, LimitScope::job_class};
        t.config.classes["Parked"].concurrency_limit = ConcurrencySpec{10, LimitScope::job_class};
        t.config.classes["Fair"].fair_tenant_queues = {FairTenantRule{"throttled", 1, 60.0}};
        t.config.classes["Fair"].fair_tenant_arg = 0;
        fair = std::make_unique<FairTenantServerMiddleware>(t.config, t.keys);
        limit = std::make_unique<ConcurrencyLimitMiddleware>(t.config, t.keys, slots,
                                                             TestRuntime::kIdentity);
        unique = std::make_unique<UniqueJobsMiddleware>(t.config, t.keys, t.dead, t.retry, locks,
                                                        TestRuntime::kIdentity);
        acquire = std::make_unique<BatchAcquire>(t.config, t.keys, t.rt.limits, locks, &slots,
                                                 TestRuntime::kIdentity);
        fetcher = const_cast<ReliableFetcher*>(t.reliable());  // also marks it ready
        fetcher->set_acquirer(acquire.get(), true);  // these takes have no pace to measure
    }
    // Every job the queue holds, taken through the fetch buffer (one refill of up to 50).
    std::vector<UnitOfWork> take_all(size_t n) {
        std::vector<UnitOfWork> out;
        std::mt19937_64 rng(1);
        while (out.size() < n) {
            auto u = t.fetcher.retrieve_work(conn, rng, 0);
            REQUIRE(u);
            out.push_back(std::move(*u));
        }
        return out;
    }
    // Runs `unit` through `m` as the processor does (with what it carries); true when it ran.
    bool run(const ServerMiddleware& m, UnitOfWork& unit, std::vector<redis::Command>& after_job,
             std::vector<redis::Command>& after_refill, const std::function<void()>& body) {
        auto parsed = parse_job(unit.payload, "default");
        Job& j = std::get<Job>(parsed);
        JobContext ctx{j, *t.log, t.lifecycle.hard_stop, conn, t.keys, t.config, t.rt.identity};
        ctx.after_job = &after_job;
        ctx.after_refill = &after_refill;
        ctx.acquired = unit.acquired.get();
        ctx.working_list = t.fetcher.working_list("default");
        bool ran = false;
        m.call(ctx, [&] {
            ran = true;
            body();
        });
        return ran;
    }
    size_t acquired(const std::vector<UnitOfWork>& units, Acquired::Kind kind) {
        size_t n = 0;
        for (const auto& u : units)
            if (u.acquired)
                for (const auto& a : u.acquired->items) n += a.kind == kind;
        return n;
    }

    TestRuntime t;
    LockKeeper locks;
    SlotKeeper slots;
    redis::Connection conn;
    std::unique_ptr<ConcurrencyLimitMiddleware> limit;
    std::unique_ptr<UniqueJobsMiddleware> unique;
    std::unique_ptr<FairTenantServerMiddleware> fair;
    std::unique_ptr<BatchAcquire> acquire;
    ReliableFetcher* fetcher = nullptr;
};

const std::string kSlots = "kiqd:concurrency:Limited:slots";

}  // namespace

TEST_CASE(
    "batch acquire: a limit reached inside one refill — the first take slots, the rest "
    "park as before",
    "[batch_acquire][concurrency][batch][fetch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    Fixture f(server);
    for (int i = 0; i < 5; ++i)
        f.conn.command({"LPUSH", "queue:default", job("Limited", "l" + std::to_string(i), "x")});
    auto units = f.take_all(5);
    // One refill took all five; two slots were free, so two jobs carry one each.
    CHECK(zcard(f.conn, kSlots) == 2);
    CHECK(f.acquired(units, Acquired::Kind::slot) == 2);
    CHECK(f.slots.held() == 2);
    CHECK(llen(f.conn, "queue:default") == 0);

    std::vector<redis::Command> after_job, after_refill;
    std::vector<std::string> ran;
    // Run the two with slots while they hold them; meanwhile the others park exactly as a per-job
    // acquire does (waiting list, out of the working list).
    size_t with = 0, without = 0;
    std::function<void(size_t)> run_from = [&](size_t i) {
        if (i == units.size()) return;
        auto& u = units[i];
        const bool carries = u.acquired && !u.acquired->items.empty();
        const bool did = f.run(*f.limit, u, after_job, after_refill, [&] {
            ran.push_back(u.payload);
            CHECK(zcard(f.conn, kSlots) == 2);  // no second slot for a job that carried one
            run_from(i + 1);
        });
        (carries ? with : without) += 1;
        if (!did) run_from(i + 1);
        CHECK(did == carries);
    };
    run_from(0);
    CHECK(with == 2);
    CHECK(without == 3);
    CHECK(ran.size() == 2);
    CHECK(llen(f.conn, "kiqd:concurrency:Limited:waiting") == 3);
    CHECK(llen(f.conn, "queue:sq|testhost:1:abcdef012345|default") == 2);  // parked ones left it
    // l0's slot (1 of 2 taken: room to spare) is freed with the next refill; l1's (2 of 2) with
    // the thread's next write, as before.
    REQUIRE(after_refill.size() == 1);
    REQUIRE(after_job.size() == 1);
    for (const auto& c : after_refill) f.conn.command(c);
    for (const auto& c : after_job) f.conn.command(c);
    after_refill.clear();
    after_job.clear();
    CHECK(f.slots.held() == 0);
    // The releases moved two parked jobs back, each with its reservation.
    CHECK(llen(f.conn, "kiqd:concurrency:Limited:waiting") == 1);
    CHECK(llen(f.conn, "queue:default") == 2);
    CHECK(zcard(f.conn, kSlots) == 2);
    for (const auto& m : zrange(f.conn, kSlots)) CHECK(m[0] == '@');
    // A refill does not take a reserved job's slot ahead: its middleware takes the reservation
    // over, as without batching.
    f.conn.command({"DEL", "queue:sq|testhost:1:abcdef012345|default"});
    auto back = f.take_all(2);
    CHECK(f.acquired(back, Acquired::Kind::slot) == 0);
    for (auto& u : back) CHECK(f.run(*f.limit, u, after_job, after_refill, [] {}));
    CHECK(f.slots.held() == 0);
}

TEST_CASE(
    "batch acquire: the held hash carries its marker — a hashtable from the first lock, never "
    "a lock to the survey or the reaper",
    "[batch_acquire][unique][batch][fetch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    Fixture f(server);
    const std::string held = "kiqd:unique:held";
    f.conn.command({"LPUSH", "queue:default", job("Uniq", "m1", "a"), job("Uniq", "m2", "b")});
    auto units = f.take_all(2);
    REQUIRE(f.acquired(units, Acquired::Kind::exec_lock) == 2);
    // Two short locks would fit a listpack; the marker's long value makes it a hashtable.
    CHECK(f.conn.command({"HLEN", held}).integer() == 3);
    CHECK(std::string(f.conn.command({"HGET", held, KIQD_HELD_MARKER_FIELD}).str()) ==
          KIQD_HELD_MARKER_VALUE);
    CHECK(std::string(f.conn.command({"OBJECT", "ENCODING", held}).str()) == "hashtable");
    // `kiqd unique` lists the two run locks and not the marker.
    size_t run_locks = 0;
    for (const auto& l : survey_unique_locks(f.conn, f.t.keys)) {
        CHECK_FALSE(LockKeeper::is_marker(l.key));
        run_locks += l.kind == "run";
    }
    CHECK(run_locks == 2);

    std::vector<redis::Command> after_job, after_refill;
    for (auto& u : units) CHECK(f.run(*f.unique, u, after_job, after_refill, [] {}));
    for (const auto& c : after_refill) f.conn.command(c);
    // The locks are gone; the marker stays, and with it the encoding.
    CHECK(held_lock_count(f.conn) == 0);
    CHECK(f.conn.command({"HLEN", held}).integer() == 1);
    CHECK(std::string(f.conn.command({"OBJECT", "ENCODING", held}).str()) == "hashtable");
    // The reaper does not take the marker for a dead owner's lock.
    CHECK(f.locks.reap(f.conn, false) == 0);
    CHECK(f.conn.command({"HEXISTS", held, KIQD_HELD_MARKER_FIELD}).integer() == 1);
}

TEST_CASE(
    "batch acquire: duplicates inside one refill — one takes the lock, the other's "
    "middleware decides as before",
    "[batch_acquire][unique][batch][fetch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    Fixture f(server);
    f.conn.command({"LPUSH", "queue:default", job("Uniq", "u1", "same"), job("Uniq", "u2", "same"),
                    job("Uniq", "u3", "other")});
    auto units = f.take_all(3);
    // u1 and u3 (different identities) took their EXEC locks; u2, u1's duplicate, took nothing.
    CHECK(f.acquired(units, Acquired::Kind::exec_lock) == 2);
    CHECK(!units[1].acquired);
    CHECK(f.locks.held() == 2);
    CHECK(held_lock_count(f.conn) == 2);

    std::vector<redis::Command> after_job, after_refill;
    // u1 runs on its lock; u2, meanwhile, finds it busy: while_executing's default on_conflict
    // (reject) sends it to the dead set, as a per-job acquire would.
    const bool u1 = f.run(*f.unique, units[0], after_job, after_refill, [&] {
        CHECK_FALSE(f.run(*f.unique, units[1], after_job, after_refill, [] {}));
    });
    CHECK(u1);
    CHECK(zcard(f.conn, "dead") == 1);
    // u1's release waits for the next refill (its lock was taken by one); nothing else did.
    CHECK(after_refill.size() == 1);
    CHECK(f.locks.held() == 1);
    // u3 runs on its own lock without an acquire of its own: still exactly one lock of it.
    CHECK(f.run(*f.unique, units[2], after_job, after_refill,
                [&] { CHECK(held_lock_count(f.conn) == 2); }));
    CHECK(after_refill.size() == 2);
    CHECK(f.locks.held() == 0);
    // This fetcher has no processor slots (threads = 0), so it takes no deferred release: the
    // processor would send them with its next write. Sent here by hand.
    REQUIRE(f.fetcher->defer_commands(after_refill, 0) == false);
    for (const auto& c : after_refill) f.conn.command(c);
    CHECK(held_lock_count(f.conn) == 0);
    CHECK(f.conn.command({"KEYS", "*:EXEC"}).size() == 0);
}

TEST_CASE(
    "batch acquire: fair tenant — a refill registers the jobs that stay; one a rule would "
    "move is moved by its middleware as before",
    "[batch_acquire][fair_tenant][batch][fetch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    Fixture f(server);
    const std::string key = "sidekiq-fair_tenant:enqueued:Fair:tenant:t";
    f.conn.command({"LPUSH", "queue:default", job("Fair", "f1", "t"), job("Fair", "f2", "t"),
                    job("Fair", "f3", "u")});
    auto units = f.take_all(3);
    // f1 (the first of tenant t: 1 is not over the threshold of 1) and f3 (tenant u) were
    // registered by the refill; f2 would be t's second, so the refill left it alone.
    CHECK(f.acquired(units, Acquired::Kind::fair_tenant) == 2);
    CHECK(!units[1].acquired);
    CHECK(zcard(f.conn, key) == 1);
    std::vector<redis::Command> after_job, after_refill;
    CHECK(f.run(*f.fair, units[0], after_job, after_refill, [] {}));
    CHECK(zcard(f.conn, key) == 1);  // not registered twice
    // f2's middleware registers and decides as before: over the threshold, moved.
    CHECK_FALSE(f.run(*f.fair, units[1], after_job, after_refill, [] {}));
    CHECK(llen(f.conn, "queue:throttled") == 1);
    CHECK(f.run(*f.fair, units[2], after_job, after_refill, [] {}));
    CHECK(zcard(f.conn, "sidekiq-fair_tenant:enqueued:Fair:tenant:u") == 1);
    CHECK(after_job.empty());
    CHECK(after_refill.empty());
}

TEST_CASE("batch acquire: jobs acquired then given back at stop release every slot and lock",
          "[batch_acquire][concurrency][unique][batch][fetch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    Fixture f(server);
    f.conn.command({"LPUSH", "queue:default", job("Limited", "l1", "a"), job("Uniq", "u1", "a"),
                    job("Uniq", "u2", "b"), job("Plain", "p1", "a")});
    std::mt19937_64 rng(1);
    // One job taken (the refill brought all four), three left in the buffer.
    auto first = f.t.fetcher.retrieve_work(f.conn, rng, 0);
    REQUIRE(first);
    CHECK(first->payload == job("Limited", "l1", "a"));
    CHECK(zcard(f.conn, kSlots) == 1);
    CHECK(held_lock_count(f.conn) == 2);
    CHECK(f.locks.held() == 2);
    // A stop: the buffered jobs go back to the queue and release what they hold.
    auto release = f.t.fetcher.release_commands();
    f.conn.pipeline(release);
    CHECK(llen(f.conn, "queue:default") == 3);
    CHECK(held_lock_count(f.conn) == 0);
    CHECK(f.conn.command({"KEYS", "*:EXEC"}).size() == 0);
    CHECK(f.locks.held() == 0);
    // The job taken but put back (quiet) releases its slot through the requeue as well.
    f.conn.pipeline(f.t.fetcher.requeue_commands({*first}));
    CHECK(zcard(f.conn, kSlots) == 0);
    CHECK(f.slots.held() == 0);
    CHECK(llen(f.conn, "queue:default") == 4);
    // Nothing is released twice: a second requeue of the same unit adds no release.
    std::vector<redis::Command> again;
    f.t.fetcher.release_acquired(*first, again);
    CHECK(again.empty());
}

// The acquire script counts a scope's slots once and adds them with one ZADD per scope, and
// records the locks with one HSET per held hash, in writes of at most 1000 arguments (Lua's
// unpack limit): a refill of 2,410 items checks the counts, the chunking and the values.
TEST_CASE(
    "batch acquire: one refill of 1,200 locks and 1,210 slots — exact counts, every lock "
    "and slot recorded with its owner, a parked scope takes nothing",
    "[batch_acquire][concurrency][unique][batch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    Fixture f(server);
    // An expired slot (dropped before counting) and a scope with a parked job (takes nothing).
    f.conn.command({"ZADD", "kiqd:concurrency:Wide:slots", "1", "expired"});
    f.conn.command({"RPUSH", "kiqd:concurrency:Parked:waiting", "{}"});
    std::vector<UnitOfWork> units;
    for (int i = 0; i < 1200; ++i) {
        const std::string n = std::to_string(i);
        units.push_back({"default", job("Uniq", "u" + n, n)});
        units.push_back({"default", job("Wide", "w" + n, n)});
    }
    for (int i = 0; i < 10; ++i)
        units.push_back({"default", job("Parked", "p" + std::to_string(i), "x")});
    f.acquire->acquire(f.conn, units);

    size_t locks = 0, slots = 0, roomy = 0;
    for (const auto& u : units) {
        if (!u.acquired) {
            CHECK(u.payload.find("Uniq") == std::string::npos);
            continue;
        }
        // What the processor runs: the refill's parse of this very payload.
        REQUIRE(u.acquired->job);
        CHECK(u.acquired->job->raw == u.payload);
        REQUIRE(u.acquired->items.size() == 1);
        const Acquired& a = u.acquired->items[0];
        if (a.kind == Acquired::Kind::exec_lock) {
            ++locks;
            CHECK(f.conn.command({"GET", a.key}).str() == a.member);
            CHECK(f.conn.command({"HGET", "kiqd:unique:held", a.key}).str() == a.member);
            CHECK(f.conn.command({"PTTL", a.key}).integer() > 0);
        } else {
            REQUIRE(a.kind == Acquired::Kind::slot);
            CHECK(a.key == "kiqd:concurrency:Wide:slots");
            ++slots;
            roomy += a.roomy;
            CHECK_FALSE(f.conn.command({"ZSCORE", a.key, a.member}).is_nil());
        }
    }
    CHECK(locks == 1200);
    CHECK(held_lock_count(f.conn) == 1200);
    CHECK(f.locks.held() == 1200);
    // 1,100 of the 1,200 Wide jobs fit; the first 550 (at most half the limit) with room to spare.
    CHECK(slots == 1100);
    CHECK(roomy == 550);
    CHECK(zcard(f.conn, "kiqd:concurrency:Wide:slots") == 1100);
    CHECK(f.conn.command({"ZSCORE", "kiqd:concurrency:Wide:slots", "expired"}).is_nil());
    CHECK(f.slots.held() == 1100);
    CHECK(zcard(f.conn, "kiqd:concurrency:Parked:slots") == 0);
}

// The wait locks of a refill's until_and_while_executing jobs are checked with one EXISTS (per
// 1000); only when one exists does each job check its own: the job whose copy waits takes
// nothing (its middleware decides as before), all the others take their locks.
TEST_CASE(
    "batch acquire: of 1,100 until_and_while_executing jobs in one refill, only the one whose "
    "wait lock is held takes nothing",
    "[batch_acquire][unique][batch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    Fixture f(server);
    std::vector<UnitOfWork> units;
    for (int i = 0; i < 1100; ++i)
        units.push_back({"default", job("Waits", "w" + std::to_string(i), std::to_string(i))});
    auto parsed = parse_job(units[1050].payload, "default");
    auto lock =
        resolve_lock(std::get<Job>(parsed), &f.t.config.classes["Waits"], f.t.config.unique_jobs);
    REQUIRE(lock);
    const std::string wait_key = f.t.keys.digest_key(lock->digest, ":WAIT");
    f.conn.command({"SET", wait_key, "a-waiting-copy"});
    f.acquire->acquire(f.conn, units);
    for (size_t i = 0; i < units.size(); ++i) {
        if (i == 1050) {
            CHECK_FALSE(units[i].acquired);
            continue;
        }
        REQUIRE(units[i].acquired);
        CHECK(units[i].acquired->items.size() == 1);
    }
    CHECK(held_lock_count(f.conn) == 1099);
    CHECK(f.conn.command({"EXISTS", f.t.keys.digest_key(lock->digest, ":EXEC")}).integer() == 0);
    CHECK(f.conn.command({"GET", wait_key}).str() == "a-waiting-copy");
    // With no wait lock anywhere, every one takes its lock.
    f.conn.command({"FLUSHALL"});
    for (auto& u : units) u.acquired.reset();
    f.acquire->acquire(f.conn, units);
    size_t taken = 0;
    for (const auto& u : units) taken += u.acquired != nullptr;
    CHECK(taken == 1100);
    CHECK(held_lock_count(f.conn) == 1100);
}

TEST_CASE(
    "batch acquire daemon: a limit of 3 with batched reliable fetch is never exceeded, "
    "and a stop with jobs buffered leaves no slot behind",
    "[batch_acquire][concurrency][batch][daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    const std::string yaml = kiqd::test::kiqd_config(
        server,
        "concurrency: 10\nqueues: [default]\nlogging: {level: warn}\nfetch: reliable\n"
        "concurrency_limits: {check_interval: 0.5}\n"
        "handlers:\n  Test::Record:\n    concurrency_limit: 3\n");
    const auto jids = kiqd::test::push_jobs(conn, 60, [](int i) {
        return nlohmann::ordered_json{{"class", "Test::Record"}, {"args", {0.02, i}}};
    });
    {
        KiqdProcess first(KIQD_TEST_DAEMON, yaml);
        REQUIRE(kiqd::test::wait_until([&] { return kiqd::test::ran_count(conn) >= 10; },
                                       std::chrono::seconds(60)));
        CHECK(first.stop() == 0);
    }
    // The stopped process holds nothing: its running jobs released their slots, its buffered
    // ones gave theirs back with the requeue (reservations of parked jobs moved back may stay).
    for (const auto& m : zrange(conn, kSlots)) CHECK(m[0] == '@');
    KiqdProcess second(KIQD_TEST_DAEMON, yaml);
    REQUIRE(kiqd::test::wait_until(
        [&] {
            std::set<std::string> ran;
            for (const auto& r : kiqd::test::ran_records(conn))
                ran.insert(r["jid"].get<std::string>());
            return ran.size() == jids.size();
        },
        std::chrono::seconds(120)));
    CHECK(second.stop() == 0);
    // Never more than 3 running at once, over both processes.
    std::vector<std::pair<double, int>> events;  // ends sort before starts at one instant
    for (const auto& r : kiqd::test::ran_records(conn)) {
        events.emplace_back(r["started"].get<double>(), 1);
        events.emplace_back(r["ended"].get<double>(), -1);
    }
    std::sort(events.begin(), events.end());
    long running = 0, most = 0;
    for (const auto& e : events) most = std::max(most, running += e.second);
    CHECK(most <= 3);
    CHECK(most >= 2);
    for (const auto& m : zrange(conn, kSlots)) CHECK(m[0] == '@');
    std::printf("batch acquire daemon test: %zu runs for %zu jobs, max overlap %ld\n",
                events.size() / 2, jids.size(), most);
}

TEST_CASE(
    "batch acquire: a refill's deferred releases are folded into one script call that frees "
    "exactly what they held",
    "[batch_acquire][concurrency][unique][batch][fetch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    Fixture f(server);
    // Limited allows 2: l1 and l2 take the slots with the refill, l3 parks in its middleware.
    f.conn.command({"LPUSH", "queue:default", job("Limited", "l1", "a"), job("Limited", "l2", "b"),
                    job("Limited", "l3", "c"), job("Uniq", "u1", "a"), job("Uniq", "u2", "b")});
    // A lock of another owner, which a release of ours must leave alone.
    f.conn.command({"SET", "foreign:EXEC", "someone-else"});
    auto units = f.take_all(5);
    CHECK(f.acquired(units, Acquired::Kind::slot) == 2);
    CHECK(f.acquired(units, Acquired::Kind::exec_lock) == 2);
    std::vector<redis::Command> after_job, after_refill;
    REQUIRE(units[0].payload == job("Limited", "l1", "a"));
    REQUIRE(units[2].payload == job("Limited", "l3", "c"));
    // l3 comes while l1 and l2 run (a per-job acquire would take a slot freed already).
    CHECK(f.run(*f.limit, units[0], after_job, after_refill, [&] {
        CHECK(f.run(*f.limit, units[1], after_job, after_refill, [&] {
            CHECK_FALSE(f.run(*f.limit, units[2], after_job, after_refill, [] {}));
        }));
    }));
    for (size_t i = 3; i < 5; ++i)
        CHECK(f.run(*f.unique, units[i], after_job, after_refill, [] {}));
    CHECK(llen(f.conn, "kiqd:concurrency:Limited:waiting") == 1);
    // Four releases (two slots, two locks) plus ones it must not fold: another owner's lock
    // release (folded, and harmless) and a command of another kind (kept, after the fold).
    std::vector<redis::Command> cmds;
    for (auto& c : after_refill) cmds.push_back(std::move(c));
    for (auto& c : after_job) cmds.push_back(std::move(c));
    REQUIRE(cmds.size() == 4);
    cmds.push_back({"EVAL", LockKeeper::release_script_source(), "2", "foreign:EXEC",
                    "kiqd:unique:held", "not-the-owner"});
    cmds.push_back({"SET", "untouched-marker", "1"});
    f.acquire->fold_releases(f.conn, cmds);
    REQUIRE(cmds.size() == 2);
    CHECK(cmds[0][0] == "EVALSHA");
    CHECK(cmds[1] == redis::Command{"SET", "untouched-marker", "1"});
    auto replies = f.conn.pipeline(cmds);
    CHECK(replies[0].integer() == 0);  // no release failed
    // Both locks freed and forgotten, the foreign one kept; both slots freed, and the parked
    // job moved back to its queue with its reservation, as the per-job release script does.
    CHECK(held_lock_count(f.conn) == 0);
    CHECK(f.conn.command({"KEYS", "*unique*:EXEC"}).size() == 0);
    CHECK(f.conn.command({"GET", "foreign:EXEC"}).str() == "someone-else");
    CHECK(llen(f.conn, "kiqd:concurrency:Limited:waiting") == 0);
    CHECK(llen(f.conn, "queue:default") == 1);
    const auto members = zrange(f.conn, kSlots);
    REQUIRE(members.size() == 1);
    CHECK(members[0] == "@l3");
    CHECK(f.conn.command({"GET", "untouched-marker"}).str() == "1");
    // Many slots of one scope (more than Lua's unpack() takes at once) are all freed.
    std::vector<redis::Command> many;
    for (int i = 0; i < 9000; ++i) {
        const std::string m = "m" + std::to_string(i);
        f.conn.command({"ZADD", "kiqd:concurrency:Many:slots", "99999999999999", m});
        many.push_back({"EVAL", concurrency_release_script(), "2", "kiqd:concurrency:Many:slots",
                        "kiqd:concurrency:Many:waiting", m, "10000", "60000", ""});
    }
    f.acquire->fold_releases(f.conn, many);
    REQUIRE(many.size() == 1);
    CHECK(f.conn.pipeline(many)[0].integer() == 0);
    CHECK(zcard(f.conn, "kiqd:concurrency:Many:slots") == 0);
    // Many locks of one held hash (more than one MGET of the fold takes) are all freed, except
    // the one whose owner changed.
    std::vector<redis::Command> locks;
    for (int i = 0; i < 2500; ++i) {
        const std::string k = "many" + std::to_string(i) + ":EXEC";
        f.conn.command({"SET", k, "o" + std::to_string(i)});
        f.conn.command({"HSET", "kiqd:unique:held", k, "o" + std::to_string(i)});
        locks.push_back({"EVAL", LockKeeper::release_script_source(), "2", k, "kiqd:unique:held",
                         i == 1234 ? "stale-owner" : "o" + std::to_string(i)});
    }
    f.acquire->fold_releases(f.conn, locks);
    REQUIRE(locks.size() == 1);
    CHECK(f.conn.pipeline(locks)[0].integer() == 0);
    CHECK(f.conn.command({"KEYS", "many*:EXEC"}).size() == 1);
    CHECK(f.conn.command({"GET", "many1234:EXEC"}).str() == "o1234");
    CHECK(held_lock_count(f.conn) == 1);
    // One release alone is left as it is (nothing to gain).
    std::vector<redis::Command> one{
        {"EVAL", LockKeeper::release_script_source(), "2", "x:EXEC", "kiqd:unique:held", "o"}};
    f.acquire->fold_releases(f.conn, one);
    CHECK(one[0][0] == "EVAL");
}

TEST_CASE(
    "batch acquire daemon: when the queue goes idle, a release deferred to the next refill "
    "goes out without waiting for more jobs",
    "[batch_acquire][unique][batch][daemon]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    // A lock TTL of an hour: the lock can only go away by its release.
    const std::string yaml = kiqd::test::kiqd_config(
        server,
        "concurrency: 2\nqueues: [default]\nlogging: {level: warn}\nfetch: reliable\n"
        "handlers:\n  Test::Record:\n    lock: while_executing\n    lock_ttl: 3600\n");
    KiqdProcess daemon(KIQD_TEST_DAEMON, yaml);
    for (int round = 0; round < 3; ++round) {
        kiqd::test::push_jobs(conn, 20, [&](int i) {
            return nlohmann::ordered_json{{"class", "Test::Record"},
                                          {"args", {0, round * 100 + i}}};
        });
        REQUIRE(
            kiqd::test::wait_until([&] { return kiqd::test::ran_count(conn) >= 20 * (round + 1); },
                                   std::chrono::seconds(60)));
        // Nothing more is pushed: the releases still reach Redis (with the refill the idle
        // threads make, or their flush), and every lock is free again.
        REQUIRE(kiqd::test::wait_until(
            [&] {
                return held_lock_count(conn) == 0 && conn.command({"KEYS", "*:EXEC"}).size() == 0;
            },
            std::chrono::seconds(60)));
    }
    CHECK(daemon.stop() == 0);
}

// The refill's probe reads its 'f' items in place (an offset into ARGV): items of several kinds
// in one refill, before and after a refused one, each get their own answer.
TEST_CASE(
    "batch acquire: fair tenant — a key of another type refuses its item alone; the items "
    "around it are taken",
    "[batch_acquire][fair_tenant][batch][fetch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    Fixture f(server);
    const std::string bad = "sidekiq-fair_tenant:enqueued:Fair:tenant:bad";
    f.conn.command({"SET", bad, "x"});
    f.conn.command({"RPUSH", "queue:default", job("Fair", "f1", "a"), job("Limited", "l1", "x"),
                    job("Fair", "f2", "bad"), job("Uniq", "u1", "x"), job("Fair", "f3", "c")});
    auto units = f.take_all(5);
    std::map<std::string, const UnitOfWork*> by_jid;
    for (const auto& u : units) by_jid[std::get<Job>(parse_job(u.payload, "default")).jid] = &u;
    for (const char* jid : {"f1", "f3", "l1", "u1"}) {
        INFO(jid);
        REQUIRE(by_jid[jid]->acquired);
        CHECK(by_jid[jid]->acquired->items.size() == 1);
    }
    CHECK(!by_jid["f2"]->acquired);
    CHECK(f.conn.command({"GET", bad}).str() == "x");
    CHECK(zrange(f.conn, "sidekiq-fair_tenant:enqueued:Fair:tenant:a") ==
          std::vector<std::string>{"jid:f1"});
    CHECK(zrange(f.conn, "sidekiq-fair_tenant:enqueued:Fair:tenant:c") ==
          std::vector<std::string>{"jid:f3"});
    CHECK(f.conn.command({"TTL", "sidekiq-fair_tenant:enqueued:Fair:tenant:c"}).integer() > 0);
    // The refused job's middleware meets the same key and reports it: the job is in hand.
    std::vector<redis::Command> after_job, after_refill;
    UnitOfWork& f2 = const_cast<UnitOfWork&>(*by_jid["f2"]);
    CHECK_THROWS_WITH(f.run(*f.fair, f2, after_job, after_refill, [] {}),
                      Catch::Contains("WRONGTYPE " + bad));
    for (auto& u : units)
        if (u.acquired) {
            std::vector<redis::Command> out;
            f.acquire->release_unclaimed(*u.acquired, out);
            for (auto& cmd : out) f.conn.command(cmd);
        }
}

TEST_CASE(
    "batch acquire: a fair-tenant registration of a job that never reached its middleware "
    "(parked by pause control, given back) is taken back",
    "[batch_acquire][fair_tenant][batch][fetch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    Fixture f(server);
    const std::string key = "sidekiq-fair_tenant:enqueued:Fair:tenant:t";
    f.conn.command({"LPUSH", "queue:default", job("Fair", "f1", "t")});
    auto units = f.take_all(1);
    REQUIRE(f.acquired(units, Acquired::Kind::fair_tenant) == 1);
    CHECK(zcard(f.conn, key) == 1);
    // An outer middleware (pause control) parked it: the processor releases what it carries.
    std::vector<redis::Command> out;
    f.t.fetcher.release_acquired(units[0], out);
    REQUIRE(out.size() == 1);
    f.conn.pipeline(out);
    CHECK(zcard(f.conn, key) == 0);  // not counted for a job that did not run
    // Back from the pause (no refill item now), its middleware registers it as without
    // batching.
    units[0].acquired.reset();
    std::vector<redis::Command> after_job, after_refill;
    CHECK(f.run(*f.fair, units[0], after_job, after_refill, [] {}));
    CHECK(zcard(f.conn, key) == 1);
}

TEST_CASE(
    "batch acquire: a thread whose jobs are not measured short takes no slot or lock ahead "
    "(buffered jobs hold nothing they may wait long to use)",
    "[batch_acquire][concurrency][unique][batch][fetch]") {
    auto& server = RedisServer::shared();
    server.flushall();
    Fixture f(server);
    f.fetcher->set_acquirer(f.acquire.get());  // the daemon's setting: by the thread's pace
    f.conn.command({"LPUSH", "queue:default", job("Limited", "l1", "a"), job("Uniq", "u1", "a"),
                    job("Limited", "l2", "b")});
    // The first take of a thread has no pace yet: it counts as long.
    auto units = f.take_all(3);
    CHECK(f.acquired(units, Acquired::Kind::slot) == 0);
    CHECK(f.acquired(units, Acquired::Kind::exec_lock) == 0);
    CHECK(zcard(f.conn, kSlots) == 0);
    CHECK(held_lock_count(f.conn) == 0);
    // Their middlewares acquire one by one, as without batching.
    std::vector<redis::Command> after_job, after_refill;
    CHECK(f.run(*f.limit, units[0], after_job, after_refill,
                [&] { CHECK(zcard(f.conn, kSlots) == 1); }));
    CHECK(f.run(*f.unique, units[1], after_job, after_refill,
                [&] { CHECK(held_lock_count(f.conn) == 1); }));
}

TEST_CASE(
    "batch acquire daemon: slots taken ahead by cpu-bound jobs the cpu gate holds are given "
    "back at a hard shutdown",
    "[batch_acquire][concurrency][batch][daemon][cpu]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    const std::string yaml = kiqd::test::kiqd_config(
        server,
        "concurrency: 4\ncpu_bound_concurrency: 1\ntimeout: 1\nqueues: [default]\n"
        "logging: {level: warn}\nfetch: reliable\n"
        "handlers:\n  Test::Record:\n    resource_boundary: cpu\n    concurrency_limit: 100\n");
    const std::string slots = "kiqd:concurrency:Test::Record:slots";
    KiqdProcess daemon(KIQD_TEST_DAEMON, yaml);
    // Short jobs first, so that the threads' pace is measured short and the refills that bring
    // the cpu-bound jobs behind them (pushed at once: idle threads would take them one by one,
    // with no refill) acquire ahead. Five cpu-bound jobs of 5 s: one runs, the gate holds the
    // others (fetched, not started).
    kiqd::test::push_jobs(conn, 300, [](int i) {
        if (i >= 295) return nlohmann::ordered_json{{"class", "Test::Record"}, {"args", {5, i}}};
        return nlohmann::ordered_json{{"class", "Test::Other"}, {"args", {0, i}}};
    });
    REQUIRE(kiqd::test::wait_until([&] { return llen(conn, "queue:default") == 0; },
                                   std::chrono::seconds(30)));
    // With the refill's acquire every fetched one holds a slot; without it only the running one.
    const bool ahead =
        kiqd::test::wait_until([&] { return zcard(conn, slots) == 5; }, std::chrono::seconds(10));
    // Every thread's first job came from the blocking pop (the push found them idle) and counts
    // toward its pace (FetchBuffer::note_taken), so whichever thread made the last refill had
    // measured its jobs short. On a loaded machine (CI runs the sanitized suite beside this one)
    // the short jobs may measure long, and the refill then rightly takes nothing ahead: there is
    // nothing to give back, and the case says so instead of failing on the machine's load.
    if (!ahead) {
        WARN(
            "skipped: the short jobs measured long on this loaded machine; no slot was taken "
            "ahead ("
            << zcard(conn, slots) << " held)");
        CHECK(daemon.stop() == 0);
        return;
    }
    // Past the 1 s timeout: a hard shutdown. The held jobs go back to the queue and give their
    // slots back; the running one's slot stays until its job returns or its TTL.
    CHECK(daemon.stop() == 0);
    CHECK(llen(conn, "queue:default") >= 4);
    CHECK(zcard(conn, slots) <= 1);
}
