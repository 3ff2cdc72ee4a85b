#pragma once
// BatchAcquireFixture: a ReliableFetcher (batched, 50 a refill) with a BatchAcquire on a
// TestRuntime, its refills taken with retrieve_work, and the fair-tenant, concurrency-limit and
// unique-jobs middlewares to run the refilled jobs through with what they carry, against a test
// Redis. The classes: Limited (limit 2), Uniq (while_executing), Waits
// (until_and_while_executing), Wide (limit 1100), Parked (limit 10), Fair (a fair-tenant rule
// moving a tenant's second job to `throttled`). Header only; one test thread.
#include <catch2/catch.hpp>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fetch/refill_acquirer.hpp"
#include "middleware/batch_acquire.hpp"
#include "middleware/fair_tenant.hpp"
#include "middleware/limits/concurrency_limit.hpp"
#include "middleware/unique/unique_jobs.hpp"
#include "support/redis_server.hpp"
#include "support/test_runtime.hpp"

namespace kiqd::test {

inline std::string job(const std::string& cls, const std::string& jid, const std::string& arg) {
    return R"({"class":")" + cls + R"(","queue":"default","args":[")" + arg + R"("],"jid":")" +
           jid + R"("})";
}

struct BatchAcquireFixture {
    explicit BatchAcquireFixture(RedisServer& server)
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

}  // namespace kiqd::test
