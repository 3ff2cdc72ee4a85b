#pragma once
// Which counter a job counts against, for the per-class throttle (throttle.hpp) and concurrency
// limit (concurrency_limit.hpp). A scope is a Redis key fragment:
//   by class  → "<Class>"
//   by tenant → "<Class>:tenant:<tenant>"   (the payload's `fair_tenant`, as the
//                                             sidekiq-fair_tenant gem names it)
//   by arg:N  → "<Class>:arg:<N>:<args[N]>" (a string argument as it is, others as JSON)
// A job without a tenant (or without args[N]) counts in the class's own scope "<Class>", so the
// limit still bounds those jobs together instead of letting them through unlimited.
// Pure functions; safe from any thread.
#include <optional>
#include <string>

#include "kiqd/config.hpp"
#include "kiqd/job.hpp"

namespace kiqd {

// The job's tenant: the payload's `fair_tenant` when it is a non-empty string or an integer
// (its decimal text); else, when the class names one (`fair_tenant: {arg: N}` in `handlers:`),
// args[N] of the same kinds; nullopt otherwise.
std::optional<std::string> job_tenant(const Job& job, std::optional<int> tenant_arg = {});

std::string limit_scope(const Job& job, LimitScope by, int arg = -1,
                        std::optional<int> tenant_arg = {});

}  // namespace kiqd
