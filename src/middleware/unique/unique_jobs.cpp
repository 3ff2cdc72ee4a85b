#include "middleware/unique/unique_jobs.hpp"

#include <openssl/evp.h>

#include <cmath>
#include <string_view>

#include "common/outcome_counters.hpp"
#include "common/random_hex.hpp"
#include "fetch/refill_acquirer.hpp"
#include "job/raw_json_object.hpp"
#include "kiqd/clock.hpp"
#include "middleware/unique/lock_survey.hpp"
#include "middleware/unique/ruby_json.hpp"
#include "redis/lua_type_guard.hpp"
#include "redis/script_fold.hpp"

namespace kiqd {
namespace {

constexpr const char* kUntilAndWhile = "until_and_while_executing";
constexpr const char* kWhileExecuting = "while_executing";
constexpr auto kWaitLockTtl = std::chrono::seconds(60);
constexpr double kRescheduleSeconds = 5.0;  // the gem's default schedule_in

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
constexpr const char* kAcquireScript = KIQD_LUA_TYPE_GUARD R"lua(
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

// Releases the gem's client lock for one jid (release_client_lock above).
//
// KEYS[1..7] the client lock keys (k[1..7] above)
// ARGV[1]    the jid
// ARGV[2]    the digest (its member in the ZSETs: without the key prefix)
//
// Returns release_client_lock's 1, 0 or -1; a WRONGTYPE error, and nothing written, when one of
// KEYS holds another type.
constexpr const char* kClientUnlockScript = KIQD_CLIENT_LOCK_LUA R"lua(
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
constexpr const char* kClientLockScript = KIQD_CLIENT_LOCK_LUA R"lua(
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
constexpr const char* kScheduleHoldingScript = KIQD_CLIENT_LOCK_LUA R"lua(
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
constexpr const char* kDropWaitScript = R"lua(
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
)lua";

// With on_conflict: reschedule, the copy of an until_and_while_executing job that waits for the
// run lock holds the gem's client lock while it waits (the gem's rescheduled copy takes it when
// it is pushed), so the gem's client rejects the pushes made meanwhile.
bool holds_client_lock_while_waiting(const LockSpec& lock) {
    return lock.client_lock && lock.type == kUntilAndWhile && lock.on_conflict == "reschedule";
}

[[noreturn]] void invalid(const std::string& message) {
    throw JobError("Kiqd::InvalidLock", message);
}

std::optional<std::chrono::milliseconds> seconds_field(const nlohmann::json& p, const char* key) {
    auto it = p.find(key);
    if (it == p.end() || it->is_null()) return std::nullopt;
    if (!it->is_number()) invalid(std::string(key) + " must be a number of seconds");
    const double seconds = it->get<double>();
    if (!std::isfinite(seconds) || std::abs(seconds) > 1e10)
        invalid(std::string(key) + " is out of range");
    return std::chrono::milliseconds(static_cast<long long>(seconds * 1000.0));
}

// The identity arguments as Ruby's JSON.generate writes them (ruby_json.hpp), from the
// payload's own text: in the producer's key order (Ruby hashes keep insertion order), every
// digit of an integer kept, floats as Ruby prints them. Only the member the lock is on is read:
// a lock on args reads args, one on the job's own lock_args or on picked arguments never reads
// the rest.
std::string lock_args_of(const Job& job, const ClassSpec* defaults) {
    auto rewritten = [](std::optional<std::string_view> text) {
        return text ? ruby_json(*text) : std::string("[]");
    };
    if (auto own = job.member_json("lock_args")) return rewritten(own);
    if (!defaults || !defaults->lock.lock_args) return rewritten(job.member_json("args"));
    std::string picked = "[";
    for (int i : *defaults->lock.lock_args) {
        if (picked.size() > 1) picked += ',';
        auto arg = i >= 0 ? job.arg_json(static_cast<size_t>(i)) : std::nullopt;
        picked += arg ? ruby_json(*arg) : "null";
    }
    return picked + "]";
}

}  // namespace

std::string unique_digest(const std::string& prefix, const std::string* job_class,
                          const std::string* queue, const std::string& lock_args,
                          const std::optional<std::string>& apartment, bool modern) {
    // JSON.generate of the sorted [key, value] pairs: apartment < class < lock_args < queue.
    // Appended piece by piece into one reserved buffer (temporaries were a third of its cost).
    const std::string cls = job_class ? ruby_json_string(*job_class) : std::string();
    const std::string que = queue ? ruby_json_string(*queue) : std::string();
    std::string text;
    text.reserve(48 + (apartment ? apartment->size() : 0) + cls.size() + lock_args.size() +
                 que.size());
    auto pair = [&text](std::string_view head, const std::string& value, std::string_view tail) {
        text += head;
        text += value;
        text += tail;
    };
    text += '[';
    if (apartment) pair("[\"apartment\",", *apartment, "],");
    if (job_class) pair("[\"class\",", cls, "],");
    pair("[\"lock_args\",", lock_args, "]");
    if (queue) pair(",[\"queue\",", que, "]");
    text += ']';
    // OpenSSL 3 looks EVP_md5() up in its provider on every use; fetch them once.
    static EVP_MD* const md5 = EVP_MD_fetch(nullptr, "MD5", nullptr);
    static EVP_MD* const sha3 = EVP_MD_fetch(nullptr, "SHA3-256", nullptr);
    // One context per thread, reused: EVP_Digest allocates and frees one per call, which cost
    // more than the hash of these few dozen bytes (issue 25's profile).
    struct Ctx {
        EVP_MD_CTX* ctx = EVP_MD_CTX_new();
        ~Ctx() { EVP_MD_CTX_free(ctx); }
    };
    thread_local Ctx reused;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (!reused.ctx || !EVP_DigestInit_ex(reused.ctx, modern ? sha3 : md5, nullptr) ||
        !EVP_DigestUpdate(reused.ctx, text.data(), text.size()) ||
        !EVP_DigestFinal_ex(reused.ctx, md, &len))
        EVP_Digest(text.data(), text.size(), md, &len, modern ? sha3 : md5, nullptr);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    out.reserve(prefix.size() + 1 + 2 * len);
    out += prefix;
    out += ':';
    for (unsigned int i = 0; i < len; ++i) {
        out += kHex[md[i] >> 4];
        out += kHex[md[i] & 15];
    }
    return out;
}

std::optional<LockSpec> resolve_lock(const Job& job, const ClassSpec* defaults,
                                     const UniqueJobsConfig& config) {
    LockSpec s;
    // Whether the job uses a lock at all, from its `lock` member alone: the middleware is in
    // every chain, and a payload's tree costs many times its size
    // (docs/hardening-bounds.md#payload-memory).
    if (auto lock = job.member("lock"); lock && !lock->is_null()) {
        if (!lock->is_string()) invalid("lock must be a string");
        s.type = canonical_lock_type(lock->get<std::string>());
        if (s.type.empty()) invalid("unknown lock type '" + lock->get<std::string>() + "'");
    } else if (defaults && !defaults->lock.lock.empty()) {
        s.type = defaults->lock.lock;
    } else {
        return std::nullopt;
    }
    const LockDefaults* d = defaults ? &defaults->lock : nullptr;
    // The lock's options, each parsed on its own; the identity arguments are read last.
    const nlohmann::json p =
        job.members({"lock_ttl", "lock_expiration", "lock_timeout", "on_conflict", "lock_digest",
                     "lock_prefix", "unique_across_queues", "unique_across_workers", "lock_limit",
                     "at", "lock_wait_token", "lock_wait_since"});
    if (auto it = p.find("lock_wait_token"); it != p.end()) s.wait_token = *it;
    if (auto it = p.find("lock_wait_since"); it != p.end()) s.wait_since = *it;

    auto ttl = seconds_field(p, "lock_ttl");
    if (!ttl) ttl = seconds_field(p, "lock_expiration");  // the gem's legacy name
    // The gem's client lock carries the payload's own TTL (the gem reads lock_ttl.to_i: null and
    // 0 mean none); the EXEC lock, kiqd's, always has one.
    if (ttl && ttl->count() >= 1000) s.client_pttl = ttl->count() / 1000 * 1000;
    if (auto it = p.find("lock_limit"); it != p.end() && it->is_number())
        s.limit = std::max(1LL, static_cast<long long>(it->get<double>()));
    if (auto it = p.find("at"); it != p.end() && it->is_number())
        s.score = score_text(it->get<double>());
    if (!ttl || ttl->count() < 1000) ttl = d && d->lock_ttl ? d->lock_ttl : std::nullopt;
    s.ttl = ttl ? *ttl : config.default_lock_ttl;

    if (p.contains("lock_timeout")) {
        s.timeout = seconds_field(p, "lock_timeout");  // null: wait as long as it takes
    } else if (d && d->lock_timeout) {
        s.timeout = d->lock_timeout;
    } else if (s.type == kWhileExecuting) {
        s.timeout = std::chrono::milliseconds(0);  // the gem's default: do not wait
    }
    // until_and_while_executing: the copy that waits is the run that follows the running one,
    // so it waits however long that run takes unless a positive lock_timeout says otherwise.
    // The gem's client writes lock_timeout: 0 into every payload; its server then waits ~1 s and
    // drops the copy, which loses the update the copy was pushed for.
    if (s.type == kUntilAndWhile && s.timeout && s.timeout->count() <= 0) s.timeout.reset();

    std::string on_conflict;
    if (auto it = p.find("on_conflict"); it != p.end() && !it->is_null()) {
        const auto& v = it->is_object() && it->contains("server") ? (*it)["server"] : *it;
        if (!v.is_string()) invalid("on_conflict must be a string or {\"server\": ...}");
        on_conflict = v.get<std::string>();
    } else if (d && !d->on_conflict.empty()) {
        on_conflict = d->on_conflict;
    }
    if (on_conflict == "raise") on_conflict = "reject";  // an error the operator can see
    if (on_conflict != "reject" && on_conflict != "reschedule" && on_conflict != "log") {
        if (!on_conflict.empty() && on_conflict != "replace")
            invalid("unknown on_conflict '" + on_conflict + "'");
        // A dropped duplicate of until_and_while_executing loses nothing (the waiting copy
        // runs later); for while_executing it would, so its duplicates go to the dead set.
        on_conflict = s.type == kUntilAndWhile ? "log" : "reject";
    }
    s.on_conflict = on_conflict;

    if (auto it = p.find("lock_digest");
        it != p.end() && it->is_string() && !it->get<std::string>().empty()) {
        s.digest = it->get<std::string>();
        s.client_lock = true;
    } else {
        std::string prefix = "uniquejobs";
        if (auto pit = p.find("lock_prefix"); pit != p.end() && pit->is_string())
            prefix = pit->get<std::string>();
        const bool across_queues = p.value("unique_across_queues", false);
        const bool across_workers = p.value("unique_across_workers", false);
        try {
            // The gem's digest has held `apartment` (sidekiq-apartment's tenant) since 7.0.
            std::optional<std::string> apartment;
            if (auto a = job.member_json("apartment")) apartment = ruby_json(*a);
            s.digest = unique_digest(prefix, across_workers ? nullptr : &job.job_class,
                                     across_queues ? nullptr : &job.queue,
                                     lock_args_of(job, defaults), apartment, config.modern_digest);
        } catch (const std::invalid_argument& e) {
            invalid(std::string("the lock's arguments cannot be digested as Ruby does: ") +
                    e.what());
        }
    }
    return s;
}

UniqueJobsMiddleware::UniqueJobsMiddleware(const Config& config, const Keys& keys,
                                           const DeadSet& dead, const JobRetry& retry,
                                           LockKeeper& keeper, std::string identity)
    : config_(config),
      keys_(keys),
      dead_(dead),
      retry_(retry),
      keeper_(keeper),
      identity_(std::move(identity)),
      acquire_script_(kAcquireScript),
      client_unlock_script_(kClientUnlockScript),
      client_lock_script_(kClientLockScript),
      release_script_(LockKeeper::release_script_source()),
      drop_wait_script_(kDropWaitScript),
      schedule_holding_script_(kScheduleHoldingScript) {}

std::vector<std::string> UniqueJobsMiddleware::client_lock_keys(const std::string& digest) const {
    return {keys_.digest_key(digest),
            keys_.digest_key(digest, ":LOCKED"),
            keys_.digest_key(digest, ":QUEUED"),
            keys_.digest_key(digest, ":PRIMED"),
            keys_.digest_key(digest, ":INFO"),
            keys_.digest_key("uniquejobs:digests"),
            keys_.digest_key("uniquejobs:expiring_digests")};
}

void UniqueJobsMiddleware::call(JobContext& ctx, const Next& next) const {
    // A batched refill that took the EXEC lock resolved the options already (same payload, same
    // configuration): resolving and digesting them again was most of this middleware's CPU. Its
    // LockSpec is used where it is (shared, never modified), not copied.
    const Acquired* pre = ctx.acquired ? ctx.acquired->find(Acquired::Kind::exec_lock) : nullptr;
    const std::shared_ptr<const LockSpec> shared = pre ? pre->lock : nullptr;
    std::optional<LockSpec> resolved;
    if (!shared) {
        auto cls = config_.classes.find(ctx.job.handler_name());
        resolved = resolve_lock(ctx.job, cls == config_.classes.end() ? nullptr : &cls->second,
                                config_.unique_jobs);
    }
    const LockSpec* lock = shared ? shared.get() : resolved ? &*resolved : nullptr;
    if (!lock) return next();
    // Runs the job; on a failure, does to the client lock what the gem's server does
    // (`relock`: take it again for the retry) before the failure goes on to the retry logic.
    auto run = [&](const Next& body, bool relock) {
        try {
            body();
        } catch (const Interrupted&) {
            after_failure(ctx, *lock, true, relock);
            throw;
        } catch (...) {
            after_failure(ctx, *lock, false, relock);
            throw;
        }
    };
    if (lock->type == kWhileExecuting) return run_with_exec_lock(ctx, next, *lock);
    if (lock->type == kUntilAndWhile) {
        // The gem's server releases the until-lock first, then tries for the run lock. A copy
        // that comes back from waiting released it on its first arrival.
        if (!lock->wait_token && release_client_lock(ctx, *lock) < 0) return duplicate(ctx, *lock);
        return run([&] { run_with_exec_lock(ctx, next, *lock); }, true);
    }
    if (lock->type == "until_executing") {
        release_client_lock(ctx, *lock);
        return run(next, true);
    }
    // until_executed, until_expired: the run needs the lock. A copy that does not hold it (its
    // lock expired, or it is a retry kiqd's scheduler moved without the gem's client middleware)
    // takes it; if another jid holds it, that copy runs later and this one is a duplicate.
    if (lock->client_lock && take_client_lock(ctx, *lock) == 0) return duplicate(ctx, *lock);
    run(next, false);  // a failed until_executed job keeps its lock through the retry (gem 8)
    if (lock->type == "until_executed") release_client_lock(ctx, *lock);
}

long long UniqueJobsMiddleware::release_client_lock(JobContext& ctx, const LockSpec& lock) const {
    if (!lock.client_lock || ctx.job.jid.empty()) return 0;
    return client_unlock_script_
        .run(ctx.redis, client_lock_keys(lock.digest), {ctx.job.jid, lock.digest})
        .integer();
}

long long UniqueJobsMiddleware::take_client_lock(JobContext& ctx, const LockSpec& lock) const {
    if (!lock.client_lock || ctx.job.jid.empty()) return 1;
    const std::string score = lock.score.empty() ? score_text(epoch_seconds()) : lock.score;
    return client_lock_script_
        .run(ctx.redis, client_lock_keys(lock.digest),
             {ctx.job.jid, std::to_string(lock.client_pttl),
              lock.type == "until_expired" ? "1" : "0", std::to_string(lock.limit), score,
              lock.digest})
        .integer();
}

void UniqueJobsMiddleware::after_failure(JobContext& ctx, const LockSpec& lock, bool interrupted,
                                         bool relock) const {
    if (!lock.client_lock) return;
    try {
        const FailureOutcome fate =
            interrupted ? FailureOutcome::Retried : retry_.fate(ctx.job, epoch_seconds());
        if (fate == FailureOutcome::Dead) {
            // The gem's death handler: the identity is free again once its job is dead.
            ctx.redis.pipeline(client_lock_delete_commands(keys_, lock.digest));
        } else if (fate == FailureOutcome::Retried && relock) {
            // Duplicates pushed while it waits for its retry are rejected by the gem's client.
            // When another copy took the lock meanwhile, that copy runs later.
            take_client_lock(ctx, lock);
        } else if (fate == FailureOutcome::Discarded && !relock) {
            release_client_lock(ctx, lock);  // retry: false — nothing will run it again
        }
    } catch (const redis::Error& e) {
        ctx.log.warn("jid={} could not update the client lock {} after a failure: {}", ctx.job.jid,
                     lock.digest, e.what());
    }
}

void UniqueJobsMiddleware::duplicate(JobContext& ctx, const LockSpec& lock) const {
    ctx.log.warn(
        "class={} jid={} duplicate dropped: jid {} holds client lock {} and runs later",
        ctx.job.display_class(), ctx.job.jid,
        [&] {
            auto v = ctx.redis.command({"GET", keys_.digest_key(lock.digest)});
            return v.is_nil() ? std::string("?") : std::string(v.str());
        }(),
        lock.digest);
}

void UniqueJobsMiddleware::run_with_exec_lock(JobContext& ctx, const Next& next,
                                              const LockSpec& lock) const {
    const bool use_wait = lock.type == kUntilAndWhile;
    const std::string carried = lock.wait_token ? lock.wait_token->get<std::string>() : "";
    const double since = lock.wait_since ? lock.wait_since->get<double>() : 0.0;
    const std::string exec_key = keys_.digest_key(lock.digest, ":EXEC");
    // A batched refill may have taken the EXEC lock already (refill_acquirer.hpp): no round
    // trip. It takes it only where no copy waits and the lock was free, so the job just runs.
    Acquired* pre =
        ctx.acquired ? ctx.acquired->claim(Acquired::Kind::exec_lock, exec_key) : nullptr;
    const std::string owner = pre ? pre->member : LockKeeper::new_owner(identity_);
    uint64_t held = 0;
    if (pre) {
        held = pre->held;
    } else {
        const std::string wait_key = keys_.digest_key(lock.digest, ":WAIT");
        std::vector<std::string> keys{wait_key, exec_key, keeper_.held_hash()};
        std::vector<std::string> args{
            use_wait ? "1" : "0",
            carried,
            random_hex(16),
            owner,
            std::to_string(lock.ttl.count()),
            std::to_string(std::chrono::milliseconds(kWaitLockTtl).count())};
        // The previous job's lock releases (after_job) go out in the same write; the last, when it
        // is an EXEC lock's, inside this very script call.
        if (auto r = redis::take_deferred_call(ctx.after_job, release_script_, 2, 1)) {
            keys.insert(keys.end(), {(*r)[3], (*r)[4]});
            args.push_back((*r)[5]);
        }
        auto reply = acquire_script_.run_after(ctx.redis, ctx.after_job, keys, args);
        const long long outcome = reply[0].integer();
        if (outcome == 0)
            return conflict(ctx, lock, "another copy is already waiting for lock " + lock.digest,
                            true);
        if (outcome == 2) {
            const std::string token = use_wait ? std::string(reply[1].str()) : std::string();
            const double now = epoch_seconds();
            const double first = since > 0 ? since : now;
            if (lock.timeout && std::chrono::duration<double>(now - first) >= *lock.timeout) {
                if (!token.empty()) drop_wait_script_.run(ctx.redis, {wait_key}, {token});
                return conflict(ctx, lock,
                                "lock " + lock.digest + " stayed busy longer than lock_timeout",
                                false);
            }
            return park(ctx, lock, token, first);
        }
        held = keeper_.hold(exec_key, owner, lock.ttl);
        // A copy back from waiting with the client lock: the gem's server releases it when the
        // run starts (for a first arrival call() did).
        if (lock.wait_token && holds_client_lock_while_waiting(lock))
            release_client_lock(ctx, lock);
    }
    // With the lock taken by the refill, its release may wait for the next refill too.
    std::vector<redis::Command>* channel =
        pre && ctx.after_refill ? ctx.after_refill : ctx.after_job;
    auto release = [&] {
        keeper_.release(held);
        if (channel) {  // sent with the outcome or the next fetch: one round trip less
            // Built in place and moved into the command: each string is copied once.
            std::vector<std::string> keys(2);
            keys[0] = exec_key;
            keys[1] = keeper_.held_hash();
            std::vector<std::string> args(1, owner);
            channel->push_back(
                release_script_.deferred_command(ctx.redis, std::move(keys), std::move(args)));
            return;
        }
        try {
            release_script_.run(ctx.redis, {exec_key, keeper_.held_hash()}, {owner});
        } catch (const redis::Error& e) {
            // It expires by its TTL (no longer extended) or the reaper frees it.
            ctx.log.warn("jid={} could not release unique lock {}: {}", ctx.job.jid, exec_key,
                         e.what());
        }
    };
    try {
        next();
    } catch (...) {
        release();  // a failed job must not keep the lock: its retry contends like a new copy
        throw;
    }
    release();
}

void UniqueJobsMiddleware::park(JobContext& ctx, const LockSpec& lock,
                                const std::string& wait_token, double since) const {
    auto obj = RawJsonObject::parse(ctx.job.raw);
    if (!obj) throw JobError("Kiqd::InvalidLock", "payload is not a JSON object");
    if (!wait_token.empty()) obj->set_string("lock_wait_token", wait_token);
    obj->set("lock_wait_since", score_text(since));
    const double at =
        epoch_seconds() + std::chrono::duration<double>(config_.unique_jobs.wait_interval).count();
    if (holds_client_lock_while_waiting(lock))
        schedule_holding(ctx, lock, at, obj->dump(), true);
    else
        ctx.redis.command({"ZADD", keys_.schedule(), score_text(at), obj->dump()});
    ctx.log.debug("class={} jid={} waits for unique lock {}", ctx.job.display_class(), ctx.job.jid,
                  lock.digest);
}

long long UniqueJobsMiddleware::schedule_holding(JobContext& ctx, const LockSpec& lock, double at,
                                                 std::string payload, bool even_if_held) const {
    auto keys = client_lock_keys(lock.digest);
    keys.push_back(keys_.schedule());
    return schedule_holding_script_
        .run(ctx.redis, keys,
             {ctx.job.jid, std::to_string(lock.client_pttl), std::to_string(lock.limit),
              score_text(at), lock.digest, std::move(payload), even_if_held ? "1" : "0"})
        .integer();
}

void UniqueJobsMiddleware::reschedule(JobContext& ctx, const LockSpec& lock,
                                      const std::string& why) const {
    const auto& job = ctx.job;
    const double at = epoch_seconds() + kRescheduleSeconds;
    // A copy that waited no longer does: it comes back as a new arrival.
    auto obj = RawJsonObject::parse(job.raw);
    if (!obj) throw JobError("Kiqd::InvalidLock", "payload is not a JSON object");
    obj->erase("lock_wait_token");
    obj->erase("lock_wait_since");
    if (lock.type == kUntilAndWhile && lock.client_lock) {
        if (schedule_holding(ctx, lock, at, obj->dump(), false) == 0) {
            ctx.log.warn(
                "class={} jid={} duplicate dropped (on_conflict: reschedule): another copy holds "
                "client lock {} and runs later; {}",
                job.display_class(), job.jid, lock.digest, why);
            return;
        }
    } else {
        ctx.redis.command({"ZADD", keys_.schedule(), score_text(at), obj->dump()});
    }
    ctx.log.info("class={} jid={} duplicate rescheduled in {} s: {}", job.display_class(), job.jid,
                 kRescheduleSeconds, why);
}

void UniqueJobsMiddleware::conflict(JobContext& ctx, const LockSpec& lock, const std::string& why,
                                    bool another_waits) const {
    const auto& job = ctx.job;
    increment(outcome_counters().unique_conflicts);
    if (lock.on_conflict == "reschedule" && another_waits) {
        // The gem's rescheduled copy holds the client lock, so its client rejects the next
        // copies: one copy waits, the others are dropped. The waiting copy runs later.
        if (holds_client_lock_while_waiting(lock)) release_client_lock(ctx, lock);
        ctx.log.warn("class={} jid={} duplicate dropped (on_conflict: reschedule): {}",
                     job.display_class(), job.jid, why);
        return;
    }
    if (lock.on_conflict == "reject") {
        const std::string entry =
            dead_.invalid_entry(job.raw, job.queue, InvalidJob{"Kiqd::UniqueConflict", why});
        ctx.redis.pipeline(dead_.kill_commands(entry, epoch_seconds()));
        ctx.log.warn("class={} jid={} duplicate sent to the dead set: {}", job.display_class(),
                     job.jid, why);
    } else if (lock.on_conflict == "reschedule") {
        reschedule(ctx, lock, why);
    } else {
        ctx.log.warn("class={} jid={} duplicate dropped (on_conflict: log): {}",
                     job.display_class(), job.jid, why);
    }
}

}  // namespace kiqd
