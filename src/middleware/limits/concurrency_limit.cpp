#include "middleware/limits/concurrency_limit.hpp"

#include <algorithm>
#include <random>

#include "middleware/limits/limit_scope.hpp"

namespace kiqd {
namespace {

// Times come from Redis's clock (TIME), so processes on hosts whose clocks disagree still agree
// on when a slot expires. replicate_commands: Redis < 5 needs it before a write after TIME.
constexpr const char* kPrelude = R"lua(
if redis.replicate_commands then redis.replicate_commands() end
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
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
    local ok, job = pcall(cjson.decode, e)
    local q, jid = 'default', ''
    if ok and type(job) == 'table' then
      if type(job.queue) == 'string' and job.queue ~= '' then q = job.queue end
      if type(job.jid) == 'string' then jid = job.jid end
    end
    redis.call('zadd', slots, exp, '@' .. jid)
    redis.call('sadd', prefix .. 'queues', q)
    redis.call('rpush', prefix .. 'queue:' .. q, e)
  end
  return #batch
end
)lua";

// KEYS[1] slots, KEYS[2] waiting, KEYS[3] scopes, KEYS[4] (optional) the reliable-fetch working
// list holding the job. ARGV[1] limit, ARGV[2] member, ARGV[3] slot TTL ms, ARGV[4] jid,
// ARGV[5] payload, ARGV[6] scope, ARGV[7] key prefix.
// Returns 1: run (the slot is taken), 0: parked at the end of the waiting list (and taken out
// of the working list in the same step).
constexpr const char* kAcquireBody = R"lua(
local now = now_ms()
local exp = now + tonumber(ARGV[3])
local limit = tonumber(ARGV[1])
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
if redis.call('zrem', KEYS[1], '@' .. ARGV[4]) == 1 then
  redis.call('zadd', KEYS[1], exp, ARGV[2])
  return 1
end
resume(KEYS[1], KEYS[2], limit, exp, ARGV[7])
if redis.call('zcard', KEYS[1]) < limit then
  redis.call('zadd', KEYS[1], exp, ARGV[2])
  return 1
end
redis.call('rpush', KEYS[2], ARGV[5])
redis.call('hset', KEYS[3], ARGV[6], ARGV[1])  -- the checker looks after scopes with parked jobs
if KEYS[4] then redis.call('lrem', KEYS[4], 1, ARGV[5]) end
return 0
)lua";

constexpr const char* kReleaseBody = R"lua(
local now = now_ms()
redis.call('zrem', KEYS[1], ARGV[1])
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
return resume(KEYS[1], KEYS[2], tonumber(ARGV[2]), now + tonumber(ARGV[3]), ARGV[4])
)lua";

constexpr const char* kCheckBody = R"lua(
local now = now_ms()
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
local moved = resume(KEYS[1], KEYS[2], tonumber(ARGV[1]), now + tonumber(ARGV[2]), ARGV[3])
if redis.call('zcard', KEYS[1]) == 0 and redis.call('llen', KEYS[2]) == 0 then
  redis.call('hdel', KEYS[3], ARGV[4])
end
return moved
)lua";

std::string random_hex() {
    thread_local std::mt19937_64 rng(std::random_device{}());
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out(12, '0');
    auto v = rng();
    for (auto& c : out) {
        c = kHex[v & 15];
        v >>= 4;
    }
    return out;
}

}  // namespace

const std::string& ConcurrencyLimitMiddleware::release_script_source() {
    static const std::string s = std::string(kPrelude) + kReleaseBody;
    return s;
}

const std::string& ConcurrencyLimitMiddleware::check_script_source() {
    static const std::string s = std::string(kPrelude) + kCheckBody;
    return s;
}

bool ConcurrencyLimitMiddleware::configured(const Config& config) {
    return std::any_of(config.classes.begin(), config.classes.end(),
                       [](const auto& kv) { return kv.second.concurrency_limit.has_value(); });
}

ConcurrencyLimitMiddleware::ConcurrencyLimitMiddleware(const Config& config, const Keys& keys,
                                                       SlotKeeper& keeper, std::string identity)
    : config_(config),
      keys_(keys),
      keeper_(keeper),
      identity_(std::move(identity)),
      acquire_script_(std::string(kPrelude) + kAcquireBody),
      release_script_(release_script_source()) {
    for (const auto& [name, cls] : config.classes)
        if (cls.concurrency_limit) classes_.emplace(name, &cls);
}

void ConcurrencyLimitMiddleware::call(JobContext& ctx, const Next& next) const {
    auto it = classes_.find(ctx.job.handler_name());
    if (it == classes_.end()) return next();
    const ClassSpec& cls = *it->second;
    const ConcurrencySpec& spec = *cls.concurrency_limit;
    const std::string scope = limit_scope(ctx.job, spec.by, -1, cls.fair_tenant_arg);
    const std::string slots = keys_.concurrency_slots(scope);
    const std::string waiting = keys_.concurrency_waiting(scope);
    const std::string member = identity_ + "|" + ctx.job.jid + "|" + random_hex();
    const std::string limit = std::to_string(spec.limit);
    const std::string ttl = std::to_string(keeper_.config().slot_ttl.count());
    std::vector<std::string> keys{slots, waiting, keys_.concurrency_scopes()};
    if (ctx.working_list) keys.push_back(*ctx.working_list);
    auto reply = acquire_script_.run(
        ctx.redis, keys, {limit, member, ttl, ctx.job.jid, ctx.job.raw, scope, keys_.prefix()});
    if (reply.integer() == 0) {
        ctx.log.debug("class={} jid={} waits for a slot ({} running in {})",
                      ctx.job.display_class(), ctx.job.jid, spec.limit, scope);
        return;  // parked in Redis: neither processed nor failed
    }
    const uint64_t held = keeper_.hold(slots, member);
    auto release = [&] {
        keeper_.release(held);
        redis::Command cmd{"EVAL", release_script_source(), "2", slots, waiting, member, limit,
                           ttl,    keys_.prefix()};
        if (ctx.after_job) {  // sent with the outcome or the next fetch: one round trip less
            ctx.after_job->push_back(std::move(cmd));
            return;
        }
        try {
            release_script_.run(ctx.redis, {slots, waiting}, {member, limit, ttl, keys_.prefix()});
        } catch (const redis::Error& e) {
            // The slot expires within slot_ttl (no longer extended); the check moves the
            // parked jobs back then.
            ctx.log.warn("jid={} could not release its slot in {}: {}", ctx.job.jid, slots,
                         e.what());
        }
    };
    try {
        next();
    } catch (...) {
        release();
        throw;
    }
    release();
}

}  // namespace kiqd
