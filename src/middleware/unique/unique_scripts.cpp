// The Lua scripts of the unique-jobs middleware (see unique_scripts.hpp).
#include "middleware/unique/unique_scripts.hpp"

#include "middleware/unique/lock_keeper.hpp"
#include "redis/lua_type_guard.hpp"

namespace kiqd::unique_scripts {

// The gem's client lock of digest D, as its Lua scripts keep it
// (docs/data-model.md#unique-jobs-keys). Lua functions, put in front of the scripts that call
// them; k is the list of keys:
// k[1] D, the digest key (the last locking jid)
// k[2] D:LOCKED, the hash of the lock's holders, keyed by jid
// k[3] D:QUEUED, a list of jids, where the gem's waiters block
// k[4] D:PRIMED, a list of jids
// k[5] D:INFO, the lock's info
// k[6] uniquejobs:digests, the ZSET of the digests in use
// k[7] uniquejobs:expiring_digests, the ZSET of until_expired digests with a TTL
//
//   release_client_lock(k, jid, member) — the gem's unlock.lua (member: the digest as the
// ZSETs hold it, without the key prefix). Removes jid from D:QUEUED and D:PRIMED
// in any case. Returns -1 when another jid holds the lock, 0 when nobody does (nothing else
// written), else frees it (with the last holder D, D:LOCKED, D:PRIMED and D:INFO go and D leaves
// the digests ZSET), pushes '1' to D:QUEUED with a 5 s TTL to wake a gem waiter, and returns 1.
//   take_client_lock(k, jid, pttl, expiring, limit, score, member) — the gem's queue_and_lock.lua
//   (8.x;
// 7.1's queue.lua + lock.lua leave the same keys). Returns 1 when jid holds the lock (already, or
// now: D = jid, jid in D:LOCKED, D in digests with `score`, or in expiring_digests at score +
// pttl when `expiring`; D, D:LOCKED, D:INFO expire after pttl ms when pttl > 0), 0 when `limit`
// other jids hold it (nothing written).
//   client_lock_refused(k)
// The WRONGTYPE error (lua_type_guard.hpp) when a key those functions write holds another type,
// else nil: a script calls it before its first write, as Redis keeps the writes made before a
// failing command.
#define KIQD_CLIENT_LOCK_LUA                                                          \
    KIQD_LUA_TYPE_GUARD                                                               \
    "local function client_lock_refused(k)\n"                                         \
    "  return wrong_type({k[1], 'string', k[2], 'hash', k[3], 'list',\n"              \
    "                     k[4], 'list', k[6], 'zset', k[7], 'zset'})\n"               \
    "end\n"                                                                           \
    "local function release_client_lock(k, jid, member)\n"                            \
    "  redis.call('lrem', k[3], 0, jid)\n"                                            \
    "  redis.call('lrem', k[4], 0, jid)\n"                                            \
    "  if redis.call('hexists', k[2], jid) == 0 then\n"                               \
    "    if redis.call('hlen', k[2]) > 0 then return -1 end\n"                        \
    "    return 0\n"                                                                  \
    "  end\n"                                                                         \
    "  redis.call('hdel', k[2], jid)\n"                                               \
    "  if redis.call('hlen', k[2]) == 0 then\n"                                       \
    "    redis.call('del', k[1], k[2], k[4], k[5])\n"                                 \
    "    redis.call('zrem', k[6], member)\n"                                          \
    "  end\n"                                                                         \
    "  redis.call('lpush', k[3], '1')\n"                                              \
    "  redis.call('pexpire', k[3], 5000)\n"                                           \
    "  return 1\n"                                                                    \
    "end\n"                                                                           \
    "local function take_client_lock(k, jid, pttl, expiring, limit, score, member)\n" \
    "  if redis.call('hexists', k[2], jid) == 1 then return 1 end\n"                  \
    "  if redis.call('hlen', k[2]) >= limit then return 0 end\n"                      \
    "  redis.call('set', k[1], jid)\n"                                                \
    "  if expiring and pttl > 0 then\n"                                               \
    "    redis.call('zadd', k[7], tonumber(score) + pttl, member)\n"                  \
    "  else\n"                                                                        \
    "    redis.call('zadd', k[6], score, member)\n"                                   \
    "  end\n"                                                                         \
    "  redis.call('hset', k[2], jid, score)\n"                                        \
    "  if pttl > 0 then\n"                                                            \
    "    redis.call('pexpire', k[1], pttl)\n"                                         \
    "    redis.call('pexpire', k[2], pttl)\n"                                         \
    "    redis.call('pexpire', k[5], pttl)\n"                                         \
    "  end\n"                                                                         \
    "  return 1\n"                                                                    \
    "end\n"

// One starting copy of a while_executing or until_and_while_executing job tries to take the
// EXEC lock; with the wait lock (until_and_while_executing), a copy that finds EXEC busy becomes
// or stays the one copy that waits.
//
// KEYS[1]    <digest>:WAIT, the wait lock (value: the waiting copy's token)
// KEYS[2]    <digest>:EXEC, the exec lock (value: its owner)
// KEYS[3]    the held-locks hash (kiqd:unique:held, exec lock key → owner), read by the reaper
// ARGV[1]    "1" = use the wait lock (until_and_while_executing), else "0"
// ARGV[2]    the wait token this copy carries in its payload ("" if none)
// ARGV[3]    a fresh token, for a copy that starts to wait
// ARGV[4]    the exec lock's owner, "<identity> <token>"
// ARGV[5]    the exec lock's TTL in ms
// ARGV[6]    the wait lock's TTL in ms
//
// Optionally, first, the previous job's release (LockKeeper's release script, folded into this
// call so that a job costs one script call, not two; its failure is ignored, as the reply of a
// deferred release is):
// KEYS[4]    that job's EXEC lock
// KEYS[5]    the held-locks hash
// ARGV[7]    that lock's owner
//
// Returns
//   {0}         with the wait lock: another copy (a different token) holds it, so this one is
//               a duplicate; nothing written.
//   a WRONGTYPE error, with nothing written, when KEYS[3] holds another type
//   {1}         the exec lock was free and is now ARGV[4]'s (SET NX PX ARGV[5]), recorded in
//               KEYS[3] (with the hash's marker, lock_keeper.hpp); the wait lock, if this copy held
//               it, is deleted: run the job.
//   {2, ''}     without the wait lock: the exec lock is busy; nothing written.
//   {2, token}  with the wait lock: the exec lock is busy, and this copy now holds the wait lock
//               under `token` (the one it carried, else ARGV[3]) for another ARGV[6] ms: park it
//               with the token.
const char* const kAcquire = KIQD_LUA_TYPE_GUARD R"lua(
-- Not release_lock (lock_keeper.hpp): each call on its own pcall, so that a lock key of another
-- type (whose GET fails) still lets the held hash forget the entry.
if KEYS[5] then
  if redis.pcall('get', KEYS[4]) == ARGV[7] then redis.pcall('del', KEYS[4]) end
  if redis.pcall('hget', KEYS[5], KEYS[4]) == ARGV[7] then redis.pcall('hdel', KEYS[5], KEYS[4]) end
end
local w = false
if ARGV[1] == '1' then
  w = redis.call('get', KEYS[1])
  if w and w ~= ARGV[2] then return {0} end
end
local refused = wrong_type({KEYS[3], 'hash'})
if refused then return refused end
if redis.call('set', KEYS[2], ARGV[4], 'NX', 'PX', ARGV[5]) then
  if w then redis.call('del', KEYS[1]) end
  redis.call('hset', KEYS[3], KEYS[2], ARGV[4], ')lua" KIQD_HELD_MARKER_FIELD R"lua(',
             ')lua" KIQD_HELD_MARKER_VALUE R"lua(')
  return {1}
end
if ARGV[1] ~= '1' then return {2, ''} end
local token = w or ARGV[3]
redis.call('set', KEYS[1], token, 'PX', ARGV[6])
return {2, token}
)lua";

// kAcquire for a copy of an until_and_while_executing job pushed by the gem's client (a payload
// with the gem's lock_digest), which the gem's server releases before it tries the run lock: the
// release and the acquire in ONE call, so that such a job costs the script calls of kiqd's own
// lock. No TYPE check per key: every key it writes is first read by a command that fails on a
// key of another type (HEXISTS/HLEN D:LOCKED, LLEN D:QUEUED and D:PRIMED, GET WAIT), or is
// written by a command that takes any type (SET, DEL, PEXPIRE), or is the held hash, whose HSET
// is this call's first write; the digests ZSET's entry is removed with pcall (a key of another
// type holds no entry). So a key of another type fails the call with nothing written.
//
// KEYS[1..3] as kAcquire (WAIT, EXEC, the held hash)
// KEYS[4..9] the client lock: D, D:LOCKED, D:QUEUED, D:PRIMED, D:INFO, uniquejobs:digests
// ARGV[1..6] as kAcquire (ARGV[1] is "1": until_and_while_executing uses the wait lock)
// ARGV[7]    the jid
// ARGV[8]    the digest (its member in the digests ZSET)
// ARGV[9]    "1": the copy's first arrival (another jid holding the client lock makes it a
//            duplicate); "0": back from waiting
// ARGV[10]   "1": on_conflict reschedule — a copy that waits keeps (or goes on holding) its
//            client lock; "0": it is released whatever the outcome
// Optionally the previous job's release, as kAcquire's KEYS[4], KEYS[5] and ARGV[7]:
// KEYS[10], KEYS[11], ARGV[11].
//
// Returns kAcquire's {0}, {1}, {2, token}, with the client lock released as the gem's
// release_client_lock does (held by this jid: freed, the wake-up token pushed to D:QUEUED), and
// kept on {2, token} with ARGV[10] "1"; or
//   {3}         a first arrival while another jid holds the client lock: a duplicate (the
//               holder runs later). Only the jid's entries in D:QUEUED and D:PRIMED are removed,
//               as the gem's unlock does.
const char* const kAcquireReleasingClientLock = R"lua(
if KEYS[11] then
  if redis.pcall('get', KEYS[10]) == ARGV[11] then redis.pcall('del', KEYS[10]) end
  if redis.pcall('hget', KEYS[11], KEYS[10]) == ARGV[11] then
    redis.pcall('hdel', KEYS[11], KEYS[10])
  end
end
local jid = ARGV[7]
-- Reads first: each checks its key's type before anything is written.
local w = redis.call('get', KEYS[1])
local mine = redis.call('hexists', KEYS[5], jid) == 1
local others = redis.call('hlen', KEYS[5]) - (mine and 1 or 0)
local queued = redis.call('llen', KEYS[6]) > 0
local primed = redis.call('llen', KEYS[7]) > 0
local function forget_jid()
  if queued then redis.call('lrem', KEYS[6], 0, jid) end
  if primed then redis.call('lrem', KEYS[7], 0, jid) end
end
if ARGV[9] == '1' and not mine and others > 0 then
  forget_jid()
  return {3}
end
local outcome = 2
if w and w ~= ARGV[2] then
  outcome = 0
elseif redis.call('exists', KEYS[2]) == 0 then
  outcome = 1
  redis.call('hset', KEYS[3], KEYS[2], ARGV[4], ')lua" KIQD_HELD_MARKER_FIELD R"lua(',
             ')lua" KIQD_HELD_MARKER_VALUE R"lua(')
  redis.call('set', KEYS[2], ARGV[4], 'PX', ARGV[5])
  if w then redis.call('del', KEYS[1]) end
end
forget_jid()
if mine and (outcome ~= 2 or ARGV[10] ~= '1') then
  redis.call('hdel', KEYS[5], jid)
  if others == 0 then
    redis.call('del', KEYS[4], KEYS[5], KEYS[7], KEYS[8])
    redis.pcall('zrem', KEYS[9], ARGV[8])
  end
  redis.call('lpush', KEYS[6], '1')
  redis.call('pexpire', KEYS[6], 5000)
end
if outcome ~= 2 then return {outcome} end
local token = w or ARGV[3]
redis.call('set', KEYS[1], token, 'PX', ARGV[6])
return {2, token}
)lua";

// Releases the gem's client lock for one jid (release_client_lock above).
//
// KEYS[1..7] the client lock keys (k[1..7] above)
// ARGV[1]    the jid
// ARGV[2]    the digest (its member in the ZSETs: without the key prefix)
//
// Returns release_client_lock's 1, 0 or -1; a WRONGTYPE error, and nothing written, when one of
// KEYS holds another type.
const char* const kClientUnlock = KIQD_CLIENT_LOCK_LUA R"lua(
local refused = client_lock_refused(KEYS)
if refused then return refused end
return release_client_lock(KEYS, ARGV[1], ARGV[2])
)lua";

// Takes the gem's client lock for one jid, as its client (and its server after a failure) does
// (take_client_lock above).
//
// KEYS[1..7] the client lock keys (k[1..7] above)
// ARGV[1]    the jid
// ARGV[2]    the TTL in ms (0: none)
// ARGV[3]    "1" for until_expired (expiring_digests), else "0"
// ARGV[4]    lock_limit
// ARGV[5]    the score (epoch seconds: the payload's `at`, else now)
// ARGV[6]    the digest (its member in the ZSETs: without the key prefix)
//
// Returns take_client_lock's 1 or 0; a WRONGTYPE error, and nothing written, when one of KEYS
// holds another type.
const char* const kClientLock = KIQD_CLIENT_LOCK_LUA R"lua(
local refused = client_lock_refused(KEYS)
if refused then return refused end
return take_client_lock(KEYS, ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1',
                        tonumber(ARGV[4]), ARGV[5], ARGV[6])
)lua";

// Puts a copy of an until_and_while_executing job in `schedule` holding the gem's client lock for
// its jid (take_client_lock above), as the gem's server does with on_conflict: reschedule: its
// client then rejects the pushes made while the copy waits.
//
// KEYS[1..7] the client lock keys (k[1..7] above)
// KEYS[8]    schedule
// ARGV[1]    the jid
// ARGV[2]    the client lock's TTL in ms (0: none)
// ARGV[3]    lock_limit
// ARGV[4]    when the copy is due (epoch seconds): its score in `schedule` and the lock's
// ARGV[5]    the digest (its member in the ZSETs: without the key prefix)
// ARGV[6]    the copy's payload
// ARGV[7]    "1": schedule the copy even when another jid holds the lock (a copy that holds the
//            wait lock: the other jid's copy is the duplicate), else "0"
//
// Returns 1 when the jid holds the client lock (the copy is scheduled), 0 when another jid holds
// it (the copy is scheduled only with ARGV[7] "1"); a WRONGTYPE error, and nothing written, when
// one of KEYS holds another type.
const char* const kScheduleHolding = KIQD_CLIENT_LOCK_LUA R"lua(
local refused = client_lock_refused(KEYS) or wrong_type({KEYS[8], 'zset'})
if refused then return refused end
local held = take_client_lock(KEYS, ARGV[1], tonumber(ARGV[2]), false, tonumber(ARGV[3]),
                              ARGV[4], ARGV[5])
if held == 1 or ARGV[7] == '1' then redis.call('zadd', KEYS[8], ARGV[4], ARGV[6]) end
return held
)lua";

// Gives the wait lock up: a waiting copy whose lock_timeout ran out stops waiting.
//
// KEYS[1] <digest>:WAIT, the wait lock
// ARGV[1] the token of the copy giving it up
//
// Returns 1 when the lock held ARGV[1] and was deleted, 0 when it held another token or was
// gone (left as it is).
const char* const kDropWait = R"lua(
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
)lua";

}  // namespace kiqd::unique_scripts
