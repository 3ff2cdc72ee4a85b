#pragma once
// in_transaction: commands that must land together, as one MULTI ... EXEC (a single command as
// it is). The one place where a job's outcome and its acknowledgement become atomic: outcome
// writes (retry or dead-set entries) are built bare, so that the fetcher can put its
// acknowledgement into the same transaction (Redis refuses a MULTI inside a MULTI). Header only,
// no state.
#include <utility>
#include <vector>

#include "kiqd/redis/connection.hpp"

namespace kiqd::redis {

inline std::vector<Command> in_transaction(std::vector<Command> body) {
    if (body.size() <= 1) return body;
    std::vector<Command> out;
    out.reserve(body.size() + 2);
    out.push_back({"MULTI"});
    for (auto& c : body) out.push_back(std::move(c));
    out.push_back({"EXEC"});
    return out;
}

}  // namespace kiqd::redis
