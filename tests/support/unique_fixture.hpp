#pragma once
// UniqueFixture: the unique-jobs middleware with its lock keeper on a TestRuntime, driven
// in-process (run_through) against a test Redis; and what sidekiq-unique-jobs' client leaves
// behind when it pushes a job under the digest uniquejobs:acct1. Header only; one test thread.
#include <functional>
#include <string>
#include <vector>

#include "middleware/unique/unique_jobs.hpp"
#include "support/redis_server.hpp"
#include "support/run_through.hpp"
#include "support/test_runtime.hpp"

namespace kiqd::test {

struct UniqueFixture {
    explicit UniqueFixture(RedisServer& server)
        : t(server),
          keeper(t.keys, server.options(), std::chrono::seconds(60), TestRuntime::kIdentity,
                 *t.log),
          unique(t.config, t.keys, t.dead, t.retry, keeper, TestRuntime::kIdentity),
          conn(server.connect()) {}

    // Runs `raw` through the middleware with `body` as the handler; true when it ran.
    // `after_job`: the processor's pending commands, kept across jobs by the caller.
    bool run(
        const std::string& raw, const std::function<void()>& body = [] {},
        std::vector<redis::Command>* after_job = nullptr) {
        return run_through(t, conn, unique, raw, body, nullptr, after_job);
    }

    TestRuntime t;
    LockKeeper keeper;
    UniqueJobsMiddleware unique;
    redis::Connection conn;
};

// The client lock sidekiq-unique-jobs' client takes when it pushes `jid` (its lock.lua).
inline void gem_client_lock(redis::Connection& c, const std::string& jid,
                            const std::string& digest = "uniquejobs:acct1") {
    c.command({"SET", digest, jid});
    c.command({"HSET", digest + ":LOCKED", jid, "1700000000.0"});
    c.command({"ZADD", "uniquejobs:digests", "1700000000", digest});
}

// The jids holding the client lock of `digest`.
inline std::vector<std::string> lock_holders(redis::Connection& c,
                                             const std::string& digest = "uniquejobs:acct1") {
    std::vector<std::string> out;
    auto keys = c.command({"HKEYS", digest + ":LOCKED"});
    for (size_t i = 0; i < keys.size(); ++i) out.emplace_back(keys[i].str());
    return out;
}

}  // namespace kiqd::test
