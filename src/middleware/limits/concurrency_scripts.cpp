#include "middleware/limits/concurrency_scripts.hpp"

#include "common/random_hex.hpp"
#include "redis/lua_type_guard.hpp"

namespace kiqd {
namespace {

// The start of every script below (not a script of its own): now_ms() and resume().
// Times come from Redis's clock (TIME), so processes on hosts whose clocks disagree still agree
// on when a slot expires. replicate_commands: Redis < 5 needs it before a write after TIME.
// resume(slots, waiting, limit, exp, prefix) moves parked jobs back and returns how many;
// resume_refused(slots, waiting, limit, prefix), called before a script's first write, returns
// the WRONGTYPE error (lua_type_guard.hpp) when a key resume() would write holds another type:
// Redis keeps the LPOP when the RPUSH after it fails, which would lose the job.
constexpr const char* kPrelude = KIQD_LUA_TYPE_GUARD R"lua(
if redis.replicate_commands then redis.replicate_commands() end
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- The queue and jid of a parked payload ('default' and '' when it is not a JSON object).
local function destination(e)
  local ok, job = pcall(cjson.decode, e)
  local q, jid = 'default', ''
  if ok and type(job) == 'table' then
    if type(job.queue) == 'string' and job.queue ~= '' then q = job.queue end
    if type(job.jid) == 'string' then jid = job.jid end
  end
  return q, jid
end
local function resume_refused(slots, waiting, limit, prefix)
  local checks = {slots, 'zset', waiting, 'list', prefix .. 'queues', 'set'}
  local free = limit - redis.call('zcard', slots)
  if free > 0 then
    for _, e in ipairs(redis.call('lrange', waiting, 0, free - 1)) do
      checks[#checks + 1] = prefix .. 'queue:' .. destination(e)
      checks[#checks + 1] = 'list'
    end
  end
  return wrong_type(checks)
end
-- Moves parked jobs back to the front of their queues while the scope has free slots, each
-- with a reservation "@<jid>" that keeps its slot until it is fetched again. The oldest is
-- pushed last, so it is the first to be fetched.
local function resume(slots, waiting, limit, exp, prefix)
  local batch = {}
  local free = limit - redis.call('zcard', slots)
  while free > 0 do
    local e = redis.call('lpop', waiting)
    if not e then break end
    batch[#batch + 1] = e
    free = free - 1
  end
  for i = #batch, 1, -1 do
    local e = batch[i]
    local q, jid = destination(e)
    redis.call('zadd', slots, exp, '@' .. jid)
    redis.call('sadd', prefix .. 'queues', q)
    redis.call('rpush', prefix .. 'queue:' .. q, e)
  end
  return #batch
end
-- Frees `member`'s slot and, when jobs are parked, drops expired slots and moves as many parked
-- jobs back as slots are free (the release script below; also run by the acquire script for the
-- previous job of the same thread). With nobody parked, expired slots are left for the next
-- acquire or check to drop (each drops them before it counts): the common release is two calls.
-- `member` may be a table of members of this scope (a refill's folded releases,
-- release_fold.cpp): one ZREM per 1000, then one resume, which moves as many parked jobs as the
-- releases one by one would have.
local function release(slots, waiting, member, limit, ttl, prefix)
  if type(member) == 'table' then
    for i = 1, #member, 1000 do  -- unpack() is bounded by Lua's C stack (8000)
      redis.call('zrem', slots, unpack(member, i, math.min(i + 999, #member)))
    end
  else
    redis.call('zrem', slots, member)
  end
  if redis.pcall('llen', waiting) == 0 then return 0 end  -- nobody parked: no type checks needed
  local now = now_ms()
  redis.call('zremrangebyscore', slots, '-inf', now)
  local refused = resume_refused(slots, waiting, limit, prefix)
  if refused then return refused end
  return resume(slots, waiting, limit, now + ttl, prefix)
end
)lua";

// Acquire: takes a slot for a job about to run, or parks the job. Expired slots are dropped
// first; a job whose reservation ("@<jid>") is there takes it over; otherwise parked jobs are
// moved back while slots are free (so jobs keep their order) before the job takes a free slot.
// KEYS[1] -> the scope's slots sorted set ("kiqd:concurrency:<scope>:slots")
// KEYS[2] -> the scope's waiting list ("kiqd:concurrency:<scope>:waiting")
// KEYS[3] -> the scopes hash ("kiqd:concurrency:scopes": scope -> limit)
// KEYS[4] -> (optional) the reliable-fetch working list holding the job
// --
// ARGV[1] -> the limit
// ARGV[2] -> the slot member ("<identity>|<jid>|<token>")
// ARGV[3] -> the slot TTL in ms
// ARGV[4] -> the job's jid
// ARGV[5] -> the job's payload
// ARGV[6] -> the scope
// ARGV[7] -> the key prefix ("" or "<namespace>:")
// Optionally, first, the release of the previous job of the same thread (the release script's
// work, folded into this call so that a job costs one script call, not two; its failure is
// ignored, as the reply of a deferred release is):
// KEYS[#KEYS-1], KEYS[#KEYS] -> its slots and waiting keys (after the optional KEYS[4])
// ARGV[8] -> 'r'
// ARGV[9..12] -> the release script's ARGV[1..4]
// Returns 1: run (the slot is taken), 0: parked at the end of the waiting list (and taken out
// of the working list in the same step); a WRONGTYPE error, with nothing written but expired
// slots dropped, when a key it would write holds another type.
constexpr const char* kAcquireBody = R"lua(
local nkeys = #KEYS
if ARGV[8] == 'r' then
  nkeys = nkeys - 2
  pcall(release, KEYS[nkeys + 1], KEYS[nkeys + 2], ARGV[9], tonumber(ARGV[10]),
        tonumber(ARGV[11]), ARGV[12])
end
local working = false
if nkeys >= 4 then working = KEYS[4] end
local now = now_ms()
local exp = now + tonumber(ARGV[3])
local limit = tonumber(ARGV[1])
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
if redis.call('zrem', KEYS[1], '@' .. ARGV[4]) == 1 then
  redis.call('zadd', KEYS[1], exp, ARGV[2])
  return 1
end
-- The common case, a free slot and nobody parked: only KEYS[1] (a zset, or the ZREMRANGEBYSCORE
-- above would have failed) is written, so none of the type checks below is needed (they cost
-- 6-7 TYPE calls per job). A waiting key of another type goes the long way, to its error.
local parked = redis.pcall('llen', KEYS[2])
if parked == 0 and redis.call('zcard', KEYS[1]) < limit then
  redis.call('zadd', KEYS[1], exp, ARGV[2])
  return 1
end
local checks = {KEYS[3], 'hash'}
if working then
  checks[3] = working
  checks[4] = 'list'
end
local refused = resume_refused(KEYS[1], KEYS[2], limit, ARGV[7]) or wrong_type(checks)
if refused then return refused end
resume(KEYS[1], KEYS[2], limit, exp, ARGV[7])
if redis.call('zcard', KEYS[1]) < limit then
  redis.call('zadd', KEYS[1], exp, ARGV[2])
  return 1
end
redis.call('rpush', KEYS[2], ARGV[5])
redis.call('hset', KEYS[3], ARGV[6], ARGV[1])  -- the checker looks after scopes with parked jobs
if working then redis.call('lrem', working, 1, ARGV[5]) end
return 0
)lua";

// Release: frees a finished job's slot, drops expired ones, and moves as many parked jobs back
// to the front of their queues as slots are free.
// KEYS[1] -> the scope's slots sorted set
// KEYS[2] -> the scope's waiting list
// --
// ARGV[1] -> the slot member to free
// ARGV[2] -> the limit
// ARGV[3] -> the slot TTL in ms (for the reservations of the jobs moved back)
// ARGV[4] -> the key prefix ("" or "<namespace>:")
// Returns how many parked jobs were moved back; a WRONGTYPE error, with the slot freed but no
// parked job moved, when a key resume() would write holds another type.
constexpr const char* kReleaseBody = R"lua(
return release(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4])
)lua";

// Check (the SlotKeeper's periodic pass, per scope): drops expired slots, moves parked jobs back
// into the free ones, and forgets the scope when it has neither slots nor parked jobs left.
// KEYS[1] -> the scope's slots sorted set
// KEYS[2] -> the scope's waiting list
// KEYS[3] -> the scopes hash ("kiqd:concurrency:scopes")
// --
// ARGV[1] -> the limit
// ARGV[2] -> the slot TTL in ms (for the reservations of the jobs moved back)
// ARGV[3] -> the key prefix ("" or "<namespace>:")
// ARGV[4] -> the scope (its field in KEYS[3])
// Returns how many parked jobs were moved back; a WRONGTYPE error, with nothing written but
// expired slots dropped, when a key it would write holds another type.
constexpr const char* kCheckBody = R"lua(
local now = now_ms()
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
local refused = resume_refused(KEYS[1], KEYS[2], tonumber(ARGV[1]), ARGV[3]) or
  wrong_type({KEYS[3], 'hash'})
if refused then return refused end
local moved = resume(KEYS[1], KEYS[2], tonumber(ARGV[1]), now + tonumber(ARGV[2]), ARGV[3])
if redis.call('zcard', KEYS[1]) == 0 and redis.call('llen', KEYS[2]) == 0 then
  redis.call('hdel', KEYS[3], ARGV[4])
end
return moved
)lua";

}  // namespace

const std::string& concurrency_acquire_script() {
    static const std::string s = std::string(kPrelude) + kAcquireBody;
    return s;
}

const std::string& concurrency_release_script() {
    static const std::string s = std::string(kPrelude) + kReleaseBody;
    return s;
}

std::string concurrency_slot_member(const std::string& identity, const std::string& jid) {
    return identity + "|" + jid + "|" + random_hex(12);
}

std::string concurrency_script_with(const char* body) {
    return std::string(kPrelude) + body;
}

const std::string& concurrency_check_script() {
    static const std::string s = std::string(kPrelude) + kCheckBody;
    return s;
}

}  // namespace kiqd
