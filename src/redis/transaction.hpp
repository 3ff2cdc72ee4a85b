#pragma once
// in_transaction: commands that must land together, all or none (a single command goes as it
// is). The one place where a job's outcome and its acknowledgement become atomic: outcome writes
// (retry or dead-set entries) are built bare, so that the fetcher can put its acknowledgement
// into the same transaction, and the middlewares that move a job out of a working list (pause,
// throttle) and the requeue at shutdown use it too. Header only, no state.
//
// Why not MULTI ... EXEC: Redis runs every command of a transaction even when one of them fails
// (WRONGTYPE at EXEC time), and nothing is rolled back. With `retry` holding a string, a failing
// job's MULTI { ZADD retry; LREM working } EXEC dropped the retry entry and still acknowledged
// the job: it was gone. So the batch is one Lua script (atomic like MULTI) that first checks the
// type of every key it will write (KIQD_LUA_TYPE_GUARD) and that every counter it increments
// holds an integer, and writes nothing when one does not: Redis answers one error reply naming
// the key, the caller's write fails as a whole (Processor::write_until_done logs the payload and
// leaves the job in its working list, where recovery finds it), and nothing is half-written.
//
// The script's ARGV is the commands one after another, each preceded by its number of words:
//   EVAL <script> 0  3 ZADD retry <payload>  4 LREM queue:sq|id|q 1 <payload>
// It answers an array of each command's reply. Commands it knows no key type for (EXPIRE, DEL)
// are run unchecked; they cannot fail on a key's type.
//
// in_transaction_if_removed: the same, but the batch lands only if its first command, the LREM
// that takes a job out of a reliable-fetch working list, removed it. A job that is not there any
// more was recovered by another process while this one was away (stopped, or cut off from Redis
// for longer than liveness_ttl): that copy owns it now, and an outcome or requeue written here
// would be a second copy (a retry entry, a job back in its queue). The script then answers
// {0} and writes nothing. The ARGV of such a batch starts with "?".
#include <string>
#include <utility>
#include <vector>

#include "kiqd/redis/connection.hpp"
#include "redis/lua_type_guard.hpp"

namespace kiqd::redis {

inline const char* guarded_batch_script() {
    return KIQD_LUA_TYPE_GUARD
        "local kinds = {zadd = 'zset', zrem = 'zset', zremrangebyscore = 'zset',\n"
        "  zremrangebyrank = 'zset', zincrby = 'zset', lpush = 'list', rpush = 'list',\n"
        "  lrem = 'list', ltrim = 'list', sadd = 'set', srem = 'set', hset = 'hash',\n"
        "  hdel = 'hash', hincrby = 'hash', incr = 'string', incrby = 'string',\n"
        "  decrby = 'string'}\n"
        "local counters = {incr = true, incrby = true, decrby = true}\n"
        "local cmds, i, conditional = {}, 1, ARGV[1] == '?'\n"
        "if conditional then i = 2 end\n"
        "while i <= #ARGV do\n"
        "  local n = tonumber(ARGV[i])\n"
        "  local c = {}\n"
        "  for j = 1, n do c[j] = ARGV[i + j] end\n"
        "  cmds[#cmds + 1] = c\n"
        "  i = i + n + 1\n"
        "end\n"
        "local checks = {}\n"
        "for _, c in ipairs(cmds) do\n"
        "  local kind = kinds[string.lower(c[1])]\n"
        "  if kind then checks[#checks + 1] = c[2]; checks[#checks + 1] = kind end\n"
        "end\n"
        "local refused = wrong_type(checks)\n"
        "if refused then return refused end\n"
        "for _, c in ipairs(cmds) do\n"
        "  if counters[string.lower(c[1])] then\n"
        "    local v = redis.call('get', c[2])\n"
        "    if v and not string.match(v, '^%-?%d+$') then\n"
        "      return redis.error_reply('ERR ' .. c[2] ..\n"
        "        ' does not hold an integer; nothing was written')\n"
        "    end\n"
        "  end\n"
        "end\n"
        "local replies = {}\n"
        "for k, c in ipairs(cmds) do\n"
        "  replies[k] = redis.call(unpack(c))\n"
        "  if conditional and k == 1 and replies[1] == 0 then return {0} end\n"
        "end\n"
        "return replies\n";
}

// One EVAL of guarded_batch_script: `head` (EVAL, the script, 0 keys, and any marker), then
// each command of `body` preceded by its number of words.
inline std::vector<Command> batch_eval(Command head, std::vector<Command> body) {
    for (auto& c : body) {
        head.push_back(std::to_string(c.size()));
        for (auto& word : c) head.push_back(std::move(word));
    }
    std::vector<Command> out;
    out.push_back(std::move(head));
    return out;
}

inline std::vector<Command> in_transaction(std::vector<Command> body) {
    if (body.size() <= 1) return body;
    return batch_eval({"EVAL", guarded_batch_script(), "0"}, std::move(body));
}

// `remove` (an LREM from a working list) and then `body`, all or none, and none at all when
// `remove` removed nothing (see above).
inline std::vector<Command> in_transaction_if_removed(Command remove, std::vector<Command> body) {
    body.insert(body.begin(), std::move(remove));
    return batch_eval({"EVAL", guarded_batch_script(), "0", "?"}, std::move(body));
}

}  // namespace kiqd::redis
