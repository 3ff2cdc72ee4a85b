#include "middleware/batch_acquire.hpp"

#include <algorithm>
#include <iterator>

#include "kiqd/clock.hpp"
#include "middleware/fair_tenant.hpp"
#include "middleware/limits/concurrency_scripts.hpp"
#include "middleware/limits/limit_scope.hpp"
#include "middleware/unique/unique_jobs.hpp"
#include "middleware/unique/unique_scripts.hpp"

namespace kiqd {
namespace {

// One refill's acquires, each taken only where it is free, else left alone (the job's
// middleware then acquires on its own, as without batching). Items in order:
//
// ARGV[1]  the number of items; then per item its kind and arguments, and per item its keys:
//   'c' (a concurrency slot): ARGV limit, member, slot TTL ms, jid; KEYS slots, waiting.
//       Taken when the scope holds no reservation for this jid ('@<jid>', which the per-job
//       acquire takes over), nobody is parked and fewer than `limit` slots are taken, after
//       dropping the expired ones.
//   'u' (an EXEC lock): ARGV use_wait ('1' until_and_while_executing), owner, TTL ms;
//       KEYS <digest>:WAIT, <digest>:EXEC, the held-locks hash.
//       Taken (SET NX PX, recorded in the hash) when no copy waits (use_wait) and the hash is
//       a hash or absent.
//   'g' (an EXEC lock of an until_and_while_executing copy pushed by the gem's client, on its
//       first arrival): ARGV owner, TTL ms, jid, digest; KEYS <digest>:WAIT, <digest>:EXEC, the
//       held-locks hash, then the gem's client lock D, D:LOCKED, D:QUEUED, D:PRIMED, D:INFO,
//       uniquejobs:digests. Taken as 'u' is, and only when no other jid holds the client lock;
//       the client lock is then released as the gem's server releases it before the run
//       (unique_scripts.cpp's kAcquireReleasingClientLock, outcome 1): the jid leaves D:QUEUED
//       and D:PRIMED; held by this jid, it is freed and the gem's wake-up token pushed. Its
//       reads go first, each a pcall, so a key of another type means "not taken".
//   'f' (a fair-tenant registration): the registration script's probe ARGV from its second on
//       (FairTenant::append_probe_args: now, max window, member, n, 2n rule arguments, n
//       marks), its 'p' replaced by the 'f'; KEYS the tenant's enqueues ZSET. Registered (the
//       probe, fair_tenant.hpp, reading this ARGV in place) unless the key holds another type,
//       the jid is registered already or a rule would move the job.
// Every check that could hit a key of another type is a pcall, and such a key means "not
// taken": the per-job path then reports it as before.
//
// Per scope and per held hash, not per job (the interpreter's cost is per redis.call, and it
// was most of Redis's CPU for these rows): a scope's expired slots are dropped, its parked jobs
// and its taken slots counted once, at its first item; the count then goes up by one per slot
// taken (nothing else writes the scope while the script runs); the slots taken are added with
// one ZADD per scope at the end. A held hash's type is read once, and the locks taken are
// recorded with one HSET per held hash at the end. The wait locks of all the refill's
// until_and_while_executing items are checked with one EXISTS first; only when one of them
// exists does each item check its own. A slot member already in the ZSET (the same
// jid twice in a refill) is counted twice: a later item may then be refused where it would have
// fit, which only sends its job down the per-job path. Writes go out per 1000 arguments (Lua's
// unpack limit).
// The held hash's marker field goes out with its locks (lock_keeper.hpp).
//
// Returns one integer per item: 0 not taken (nothing written), 1 taken with room to spare (a
// slot: at most half the limit taken, nobody parked; a lock, a registration: always), 2 taken
// (a slot, near the limit).
constexpr const char* kAcquireScript = KIQD_FAIR_PROBE_LUA R"lua(
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function failed(r) return type(r) == 'table' and r.err ~= nil end
local function write_all(cmd, key, list)
  for i = 1, #list, 1000 do
    redis.call(cmd, key, unpack(list, i, math.min(i + 999, #list)))
  end
end
-- The wait locks of the until_and_while_executing items, checked with one EXISTS (this script
-- writes none): when none exists, the common case, no item checks its own.
local waits = {}
do
  local k, a = 1, 2
  for i = 1, tonumber(ARGV[1]) do
    if ARGV[a] == 'c' then
      k = k + 2
      a = a + 5
    elseif ARGV[a] == 'f' then
      k = k + 1
      a = a + 5 + 3 * tonumber(ARGV[a + 4])
    elseif ARGV[a] == 'g' then
      waits[#waits + 1] = KEYS[k]
      k = k + 9
      a = a + 5
    else
      if ARGV[a + 1] == '1' then waits[#waits + 1] = KEYS[k] end
      k = k + 3
      a = a + 4
    end
  end
end
local some_wait = false
for i = 1, #waits, 1000 do
  if redis.call('exists', unpack(waits, i, math.min(i + 999, #waits))) > 0 then
    some_wait = true
  end
end
local scopes, sorder = {}, {}
local helds, horder = {}, {}
local function held_hash(key)
  local h = helds[key]
  if h == nil then
    local kind = redis.call('type', key)['ok']
    h = {key = key, usable = kind == 'hash' or kind == 'none',
         fields = {')lua" KIQD_HELD_MARKER_FIELD R"lua(', ')lua" KIQD_HELD_MARKER_VALUE R"lua('}}
    helds[key] = h
    horder[#horder + 1] = h
  end
  return h
end
local out = {}
local k, a = 1, 2
for i = 1, tonumber(ARGV[1]) do
  local r = 0
  if ARGV[a] == 'c' then
    local slots, waiting = KEYS[k], KEYS[k + 1]
    local limit = tonumber(ARGV[a + 1])
    local s = scopes[slots]
    if s == nil then
      s = {key = slots, adds = {}}
      s.usable = not failed(redis.pcall('zremrangebyscore', slots, '-inf', now)) and
                 redis.pcall('llen', waiting) == 0
      if s.usable then s.used = redis.call('zcard', slots) end
      scopes[slots] = s
      sorder[#sorder + 1] = s
    end
    if s.usable and s.used < limit and not redis.call('zscore', slots, '@' .. ARGV[a + 4]) then
      s.used = s.used + 1
      s.adds[#s.adds + 1] = now + tonumber(ARGV[a + 3])
      s.adds[#s.adds + 1] = ARGV[a + 2]
      if s.used * 2 <= limit then r = 1 else r = 2 end
    end
    k = k + 2
    a = a + 5
  elseif ARGV[a] == 'f' then
    -- false (another type), -1 (registered already), -2 (a rule would move it): not taken
    local got = fair_probe(KEYS[k], ARGV, a - 1)
    if got and got >= 0 then r = 1 end
    k = k + 1
    a = a + 5 + 3 * tonumber(ARGV[a + 4])
  elseif ARGV[a] == 'g' then
    local h = held_hash(KEYS[k + 2])
    local jid, locked, queued, primed = ARGV[a + 3], KEYS[k + 4], KEYS[k + 5], KEYS[k + 6]
    if h.usable and (not some_wait or redis.call('exists', KEYS[k]) == 0) then
      local n = redis.pcall('hlen', locked)
      local mine = 0
      if not failed(n) and n > 0 then mine = redis.pcall('hexists', locked, jid) end
      local q = redis.pcall('llen', queued)
      local p = redis.pcall('llen', primed)
      if not (failed(n) or failed(mine) or failed(q) or failed(p)) and n == mine and
         redis.call('set', KEYS[k + 1], ARGV[a + 1], 'NX', 'PX', ARGV[a + 2]) then
        h.fields[#h.fields + 1] = KEYS[k + 1]
        h.fields[#h.fields + 1] = ARGV[a + 1]
        if q > 0 then redis.call('lrem', queued, 0, jid) end
        if mine == 1 then
          redis.call('del', KEYS[k + 3], locked, primed, KEYS[k + 7])
          redis.pcall('zrem', KEYS[k + 8], ARGV[a + 4])
          redis.call('lpush', queued, '1')
          redis.call('pexpire', queued, 5000)
        elseif p > 0 then
          redis.call('lrem', primed, 0, jid)
        end
        r = 1
      end
    end
    k = k + 9
    a = a + 5
  else
    local h = held_hash(KEYS[k + 2])
    if h.usable and (ARGV[a + 1] ~= '1' or not some_wait or redis.call('exists', KEYS[k]) == 0) and
       redis.call('set', KEYS[k + 1], ARGV[a + 2], 'NX', 'PX', ARGV[a + 3]) then
      h.fields[#h.fields + 1] = KEYS[k + 1]
      h.fields[#h.fields + 1] = ARGV[a + 2]
      r = 1
    end
    k = k + 3
    a = a + 4
  end
  out[i] = r
end
for _, s in ipairs(sorder) do write_all('zadd', s.key, s.adds) end
for _, h in ipairs(horder) do
  if #h.fields > 2 then write_all('hset', h.key, h.fields) end
end
return out
)lua";

}  // namespace

BatchAcquire::BatchAcquire(const Config& config, const Keys& keys, const JobLimits& limits,
                           LockKeeper& locks, SlotKeeper* slots, std::string identity)
    : config_(config),
      keys_(keys),
      limits_(limits),
      locks_(locks),
      slots_(slots),
      identity_(std::move(identity)),
      fair_(config, keys),
      script_(kAcquireScript) {
    for (const auto& [name, c] : config.classes)
        if ((c.concurrency_limit && slots_) || c.lock.lock == kUntilAndWhile ||
            c.lock.lock == kWhileExecuting || !c.fair_tenant_queues.empty())
            class_names_.push_back(name);
}

std::optional<Job> BatchAcquire::plan(const UnitOfWork& unit, std::vector<Acquired>& wanted,
                                      Args& keys, Args& args) const {
    // Most payloads of a mixed queue are ruled out without parsing them: those of no class
    // configured here, unless the gem's client locked them (its lock options are in the
    // payload, whatever the class).
    const bool gem_pushed = unit.payload.find("\"lock_digest\"") != std::string::npos;
    if (!gem_pushed &&
        std::none_of(class_names_.begin(), class_names_.end(), [&](const std::string& name) {
            return unit.payload.find(name) != std::string::npos;
        }))
        return std::nullopt;
    auto parsed = parse_job(unit.payload, unit.queue, limits_);
    Job* job = std::get_if<Job>(&parsed);
    if (!job) return std::nullopt;  // the processor sends it to the dead set
    auto cls = config_.classes.find(job->handler_name());
    const ClassSpec* spec = cls == config_.classes.end() ? nullptr : &cls->second;
    if (!spec && !gem_pushed) return std::nullopt;
    // A fair-tenant registration, a slot and a lock at most: `keys` and `args` refer to the
    // items' strings, so the items must not move (Args).
    wanted.reserve(wanted.size() + 3);
    if (spec) plan_limits(*job, *spec, wanted, keys, args);
    std::optional<LockSpec> lock;
    try {
        lock = resolve_lock(*job, spec, config_.unique_jobs);
    } catch (const std::exception&) {
        // the middleware reports it
        return wanted.empty() ? std::nullopt : std::optional<Job>(std::move(*job));
    }
    // The run lock of a copy's first arrival only (a copy back from waiting carries its wait
    // token: the middleware decides for it); with the gem's client lock, of
    // until_and_while_executing only (until_* release or take the client lock around the run).
    const bool releases_client = lock && lock->client_lock && lock->type == kUntilAndWhile;
    if (!lock || lock->wait_token ||
        (lock->type != kUntilAndWhile && lock->type != kWhileExecuting) ||
        (releases_client && job->jid.empty()))
        return wanted.empty() ? std::nullopt : std::optional<Job>(std::move(*job));
    Acquired a;
    a.kind = Acquired::Kind::exec_lock;
    a.key = keys_.digest_key(lock->digest, ":EXEC");
    a.member = LockKeeper::new_owner(identity_);
    a.limit = lock->ttl.count();  // kept for the keeper's registration
    a.roomy = true;
    keys.push_back(keys_.digest_key(lock->digest, ":WAIT"));
    if (releases_client) {
        args.view("g");
    } else {
        args.view("u");
        args.view(lock->type == kUntilAndWhile ? "1" : "0");
    }
    a.lock = std::make_shared<const LockSpec>(std::move(*lock));
    const Acquired& w = wanted.emplace_back(std::move(a));
    keys.view(w.key);
    keys.view(locks_.held_hash());
    args.view(w.member);
    args.push_back(std::to_string(w.limit));  // the TTL ms
    if (releases_client) {
        auto client = client_lock_keys(keys_, w.lock->digest);
        client.pop_back();  // not expiring_digests
        for (auto& k : client) keys.push_back(std::move(k));
        args.push_back(job->jid);
        args.view(w.lock->digest);
    }
    return std::optional<Job>(std::move(*job));
}

void BatchAcquire::plan_limits(const Job& job, const ClassSpec& spec, std::vector<Acquired>& wanted,
                               Args& keys, Args& args) const {
    // The fair-tenant registration first (outermost of the three middlewares). A job marked
    // by a client (fair_tenant_registered, whatever its value) is left to the middleware.
    if (!spec.fair_tenant_queues.empty() && !job.jid.empty() &&
        !job.member(kFairTenantRegistered)) {
        std::optional<FairTenantPlan> fair;
        try {
            fair = fair_.plan(job);
        } catch (const std::invalid_argument&) {
            // the middleware reports unusable rules
        }
        if (fair) {
            std::vector<bool> would_move;
            for (const auto& rule : fair->rules) would_move.push_back(rule.queue != job.queue);
            Acquired a;
            a.kind = Acquired::Kind::fair_tenant;
            a.key = fair->key;
            a.member = "jid:" + job.jid;  // the registered member, the gem's
            a.roomy = true;
            keys.push_back(a.key);
            args.push_back("f");
            fair_.append_probe_args(args.staging(), *fair, job.jid,
                                    FairTenant::now_text(epoch_seconds()), would_move);
            args.take_staged();
            wanted.push_back(std::move(a));
        }
    }
    // The concurrency limit's slot (it sits outside the unique-jobs middleware).
    if (spec.concurrency_limit && slots_) {
        const ConcurrencySpec& limit = *spec.concurrency_limit;
        const std::string scope = limit_scope(job, limit.by, -1, spec.fair_tenant_arg);
        Acquired a;
        a.kind = Acquired::Kind::slot;
        a.key = keys_.concurrency_slots(scope);
        a.waiting = keys_.concurrency_waiting(scope);
        a.member = concurrency_slot_member(identity_, job.jid);
        a.limit = limit.limit;
        const Acquired& w = wanted.emplace_back(std::move(a));
        keys.view(w.key);
        keys.view(w.waiting);
        args.view("c");
        args.push_back(std::to_string(limit.limit));
        args.view(w.member);
        args.push_back(std::to_string(slots_->config().slot_ttl.count()));
        args.push_back(job.jid);  // copied: the job is moved out once planned
    }
}

void BatchAcquire::acquire(redis::Connection& conn, std::vector<UnitOfWork>& units) const {
    std::vector<std::vector<Acquired>> wanted(units.size());
    std::vector<std::optional<Job>> jobs(units.size());
    Args keys;
    Args args;
    args.view("");  // the number of items, known once all are planned
    size_t items = 0;
    for (size_t i = 0; i < units.size(); ++i) {
        jobs[i] = plan(units[i], wanted[i], keys, args);
        items += wanted[i].size();
    }
    if (items == 0) return;
    const std::string count = std::to_string(items);
    args.set(0, count);
    const redis::Reply reply = script_.run_views(conn, keys.views(), args.views());
    if (reply.size() != items) reply.unexpected("batch acquire: unexpected reply");
    // `keys` and `args` are done with: the items may move now.
    size_t r = 0;
    for (size_t i = 0; i < units.size(); ++i) {
        std::vector<Acquired>& want = wanted[i];
        size_t taken = 0;  // the items taken, moved to the front in order
        for (size_t j = 0; j < want.size(); ++j) {
            Acquired& a = want[j];
            const long long got = reply[r++].integer();
            if (got == 0) continue;
            if (a.kind == Acquired::Kind::slot) {
                a.roomy = got == 1;
                a.held = slots_->hold(a.key, a.member);
            } else if (a.kind == Acquired::Kind::exec_lock) {
                a.held = locks_.hold(a.key, a.member, std::chrono::milliseconds(a.limit));
            }
            if (taken != j) want[taken] = std::move(a);
            ++taken;
        }
        if (taken == 0) continue;
        want.erase(want.begin() + static_cast<std::ptrdiff_t>(taken), want.end());
        if (!units[i].acquired) {
            units[i].acquired = std::make_shared<AcquiredSet>();
            units[i].acquired->job = std::move(jobs[i]);
        }
        auto& into = units[i].acquired->items;
        if (into.empty()) {
            into = std::move(want);  // the usual case: no copy, no allocation
        } else {
            into.insert(into.end(), std::make_move_iterator(want.begin()),
                        std::make_move_iterator(want.end()));
        }
    }
}

void BatchAcquire::release_unclaimed(AcquiredSet& set, std::vector<redis::Command>& out) const {
    for (auto& a : set.items) {
        if (a.claimed) continue;
        a.claimed = true;
        if (a.kind == Acquired::Kind::fair_tenant) {
            // Registered by the refill but never reached its middleware (pause control parked
            // it, the cpu gate gave it back, a stop requeued it): without the refill it would
            // not be registered, so the registration is taken back; the job registers, and is
            // moved if a rule says so, when it reaches its middleware.
            out.push_back({"ZREM", a.key, a.member});
            continue;
        }
        // EVAL with the source: these go out in writes whose replies are checked (a requeue),
        // where a NOSCRIPT would count as a refusal.
        if (a.kind == Acquired::Kind::slot) {
            slots_->release(a.held);
            out.push_back({"EVAL", concurrency_release_script(), "2", a.key, a.waiting, a.member,
                           std::to_string(a.limit),
                           std::to_string(slots_->config().slot_ttl.count()), keys_.prefix()});
        } else if (a.kind == Acquired::Kind::exec_lock) {
            locks_.release(a.held);
            out.push_back({"EVAL", LockKeeper::release_script_source(), "2", a.key,
                           locks_.held_hash(), a.member});
            // The refill released the gem's client lock, as a start does: a copy that did not
            // start takes it again, so that the gem's client goes on rejecting duplicates.
            if (a.lock && a.lock->client_lock && a.lock->type == kUntilAndWhile && set.job) {
                redis::Command take{"EVAL", unique_scripts::kClientLock, "7"};
                for (auto& k : client_lock_keys(keys_, a.lock->digest))
                    take.push_back(std::move(k));
                for (auto& v : client_lock_take_args(*a.lock, set.job->jid))
                    take.push_back(std::move(v));
                out.push_back(std::move(take));
            }
        }
    }
}

}  // namespace kiqd
