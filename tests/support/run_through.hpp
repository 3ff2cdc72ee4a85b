#pragma once
// run_through: drives one server middleware directly with a payload, as the processor would,
// on a TestRuntime — for stepping a middleware's Redis effects without a daemon.
#include <functional>
#include <string>

#include "kiqd/middleware_chain.hpp"
#include "support/test_runtime.hpp"

namespace kiqd::test {

// Runs `raw` (it must parse as a job) through `m` with `body` as the handler; true when the
// handler ran. `working`: the reliable-fetch working list that holds the job, if any.
// `after_job`: the processor's pending commands (JobContext::after_job), kept across calls by
// the caller as a processor thread keeps them across jobs; null: none.
bool run_through(
    TestRuntime& t, redis::Connection& conn, const ServerMiddleware& m, const std::string& raw,
    const std::function<void()>& body = [] {}, const std::string* working = nullptr,
    std::vector<redis::Command>* after_job = nullptr);

}  // namespace kiqd::test
