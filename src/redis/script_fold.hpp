#pragma once
// take_deferred_call: takes a given script's deferred EVALSHA (Script::deferred_command) with a
// given shape off the end of the pending commands (JobContext::after_job). The acquire scripts
// of the unique-jobs and concurrency middlewares use it to run the previous job's release
// inside their own call: one script call per job instead of two.
// Header only; any thread (Script::sha locks the script's own mutex).
#include <optional>
#include <string>
#include <vector>

#include "kiqd/redis/script.hpp"

namespace kiqd::redis {

// The last of `pending` when it is `EVALSHA <script's sha> <keys> key... arg...` with `keys`
// keys and `args` arguments, removed from `pending`; nullopt (and `pending` untouched)
// otherwise. An EVAL with the source (the script never loaded) is not taken: it goes on its
// own, as before.
inline std::optional<Command> take_deferred_call(std::vector<Command>* pending,
                                                 const Script& script, size_t keys, size_t args) {
    if (!pending || pending->empty()) return std::nullopt;
    const Command& cmd = pending->back();
    if (cmd.size() != 3 + keys + args || cmd[0] != "EVALSHA" || cmd[2] != std::to_string(keys))
        return std::nullopt;
    const std::string sha = script.sha();
    if (sha.empty() || cmd[1] != sha) return std::nullopt;
    Command taken = std::move(pending->back());
    pending->pop_back();
    return taken;
}

}  // namespace kiqd::redis
