#pragma once
// is_deferred_call: whether a command left in JobContext::after_job is a given script's
// deferred EVALSHA (Script::deferred_command) with a given shape. The acquire scripts of the
// unique-jobs and concurrency middlewares use it to take the previous job's release out of the
// pending commands and run it inside their own call: one script call per job instead of two.
// Header only; any thread (Script::evalsha_command locks the script's own mutex).
#include <string>

#include "kiqd/redis/script.hpp"

namespace kiqd::redis {

// True when `cmd` is `EVALSHA <script's sha> <keys> key... arg...` with `keys` keys and `args`
// arguments. An EVAL with the source (the script never loaded) is not folded: it goes on its
// own, as before.
inline bool is_deferred_call(const Command& cmd, const Script& script, size_t keys, size_t args) {
    if (cmd.size() != 3 + keys + args || cmd[0] != "EVALSHA" || cmd[2] != std::to_string(keys))
        return false;
    const std::string sha = script.evalsha_command({}, {})[1];  // "" until loaded
    return !sha.empty() && cmd[1] == sha;
}

}  // namespace kiqd::redis
