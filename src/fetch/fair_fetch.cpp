#include "fetch/fair_fetch.hpp"

#include "fetch/batch_fetch_loop.hpp"
#include "redis/lua_type_guard.hpp"

namespace kiqd {
namespace {

// The fetch script of a process with fair queues: takes up to ARGV[1] jobs, each from the first
// non-empty queue of its own queue order (KIQD_BATCH_FETCH_LOOP), where taking a job from a
// fair queue splits that queue first (once per call) and then takes the next tenant's job from
// the ring (fair_fetch.hpp).
//
// KEYS          the queue lists in order.names() order; for reliable fetch their working
//               lists (KEYS[n+q] receives KEYS[q]'s jobs), and (batched) the suspects set
// ARGV[1]       how many jobs to take at most
// ARGV[2]       n, the number of queues
// ARGV[3]       m, the number of queue orders that follow
// ARGV[4..]     m orders of n entries (1-based indexes into KEYS[1..n], 0 = padding); job j
//               uses order j mod m
// then          the key prefix, the split maximum, the number of fair queues, and per fair
//               queue: its index, "arg" or "key", N or the key name, max_tenants, its name,
//               the number of weights and that many tenant, weight pairs
//
// Returns {q, payload, q, payload, ...}: for each job taken, the 1-based index of its queue
// (negated for a suspect) and the job (batch_units). A WRONGTYPE error, and nothing taken,
// when a queue or working list holds another type. A tenant list, ring or `queues` of another
// type (someone else's key) never loses a job: a split leaves the jobs in the plain queue (or
// sends a tenant's to the tenantless bucket), and a fetch from a ring that is not a list fails
// before any pop.
const char* const kFairFetchScript = KIQD_LUA_TYPE_GUARD R"lua(
local n = tonumber(ARGV[2])
local orders = tonumber(ARGV[3])
local first = 3
local i = 4 + orders * n
local prefix = ARGV[i]
local split_max = tonumber(ARGV[i + 1])
local nfair = tonumber(ARGV[i + 2])
i = i + 3
local fair = {}
local checks = {}
for k = 1, #KEYS do
  checks[2 * k - 1] = KEYS[k]
  checks[2 * k] = 'list'
end
if #KEYS > 2 * n then checks[2 * #KEYS] = 'set' end
for _ = 1, nfair do
  local q = tonumber(ARGV[i])
  local f = {mode = ARGV[i + 1], field = ARGV[i + 2], max = tonumber(ARGV[i + 3]),
             name = ARGV[i + 4], weights = {}}
  local nw = tonumber(ARGV[i + 5])
  i = i + 6
  for _ = 1, nw do
    f.weights[ARGV[i]] = tonumber(ARGV[i + 1])
    i = i + 2
  end
  if f.mode == 'arg' then
    f.index = tonumber(f.field) + 1
    f.marker = '"args":['
    f.quoted = '"args"'
  else
    f.marker = '"' .. f.field .. '":'
    f.quoted = '"' .. f.field .. '"'
    if string.find(f.field, '["\\%c]') then f.marker = nil end  -- the decoder reads it
  end
  f.ring = prefix .. 'kiqd:fair:' .. f.name .. ':ring'
  f.served = prefix .. 'kiqd:fair:' .. f.name .. ':served'
  f.list = KEYS[q] .. '@t:'
  f.queue = f.name .. '@t:'
  fair[q] = f
end
-- The ring, the served hash and the queues set are checked where they are first written
-- (split, take), so that a fetch with nothing to split pays only for the KEYS.
local refused = wrong_type(checks)
if refused then return refused end
local queues = prefix .. 'queues'

-- The job's tenant: a string (at most 200 bytes) or a number; '' when there is none.
-- cjson.decode (exact, but ~1.2 µs a job) runs only when the cheap scan below is not sure.
local function decoded_tenant(job, f)
  local ok, p = pcall(cjson.decode, job)
  if not ok or type(p) ~= 'table' then return '' end
  local v
  if f.index then
    local a = p['args']
    if type(a) ~= 'table' then return '' end
    v = a[f.index]
  else
    v = p[f.field]
  end
  if type(v) == 'string' then return string.sub(v, 1, 200) end
  if type(v) == 'number' then return string.format('%.17g', v) end
  return ''
end

-- The value that starts at `pos`, when it is a plain string (no escape, no control byte) or a
-- number, followed by `,` `]` or `}`: (tenant, true); (nil, false) when the scan cannot tell.
local smatch = string.match
local function plain_value(job, pos)
  local s = smatch(job, '^"([^"\\%c]*)"[,%]}]', pos)
  if s then
    if #s > 200 then s = string.sub(s, 1, 200) end
    return s, true
  end
  local num = string.match(job, '^(%-?%d[%d%.eE+%-]*)[,%]}]', pos)
  if num then
    local v = tonumber(num)
    if v then return string.format('%.17g', v), true end
  end
  return nil, false
end

-- Whether a marker after `before` (the payload from its `{` up to the marker) stands at depth
-- 1: with its strings blanked out, no quote is left and the brackets balance. Payloads of one
-- client share this prefix (`"retry":true,"queue":"default","class":"X",`), so the verdict is
-- kept per prefix for the script's call: the blanking (a gsub, ~0.85 µs a job, more than the
-- rest of the scan) then runs once per prefix instead of once per job.
local verdicts, nverdicts = {}, 0
local function top_level(before)
  local v = verdicts[before]
  if v ~= nil then return v end
  local blanked = string.gsub(before, '"[^"]*"', '')
  v = true
  if string.find(blanked, '"', 1, true) then
    v = false
  elseif string.find(blanked, '[%[{]') then
    local _, opens = string.gsub(blanked, '[%[{]', '')
    local _, closes = string.gsub(blanked, '[%]}]', '')
    v = opens == closes
  elseif string.find(blanked, '[%]}]') then
    v = false
  end
  if nverdicts >= 256 then verdicts, nverdicts = {}, 0 end  -- bounded: hostile prefixes
  verdicts[before] = v
  nverdicts = nverdicts + 1
  return v
end

-- The cheap scan: finds the tenant with string.find/match only, for the compact JSON objects
-- that Sidekiq clients write. It answers (nil when it is not sure) only when:
--  * the payload is `{...}` without a single backslash, so every `"` delimits a string;
--  * the marker ("args":[ or "NAME":) is at depth 1: with the strings before it blanked out,
--    no quote is left (the marker opens a string; a string followed by `:` is a key) and the
--    brackets before it balance;
--  * the key does not occur again after it (cjson keeps the last of duplicate keys);
--  * the value (for args, each element up to N) is a plain string or a number.
-- Anything else goes to cjson.decode, so the tenant is the decoder's whenever the payload is
-- JSON; a payload that is not JSON but looks like it (`{"tenant":"a",}`) is served as that
-- tenant's and dies when run, as in a plain queue.
--
-- Payloads of one client start alike up to the marker (`{"retry":true,...,"args":[`): the
-- first payload that passes keeps that head (f.head, marker at f.hp..f.he), and a payload that
-- starts with the same bytes (one plain find, which stops at its first `{`) skips the search
-- for the marker, the cut of the text before it and the bracket check: the first marker from
-- byte 2 and the text before it are the head's. A payload with another head takes the full
-- path. (~0.5 µs a job saved of ~1.1 on this VM: the marker's find stops at every `"` before
-- it, and each cut makes a Lua string.)
local sbyte, sfind, ssub = string.byte, string.find, string.sub
local function scanned_tenant(job, f)
  if not f.marker then return nil end
  if sbyte(job, -1) ~= 125 then return nil end
  local p, e
  local head = f.head
  if head and sfind(job, head, 1, true) == 1 then
    p, e = f.hp, f.he
    if sfind(job, '\\', e + 1, true) then return nil end
  else
    if sbyte(job, 1) ~= 123 or sfind(job, '\\', 1, true) then return nil end
    p, e = sfind(job, f.marker, 2, true)
    if not p or not top_level(ssub(job, 2, p - 1)) then return nil end
    f.head, f.hp, f.he = ssub(job, 1, e), p, e
  end
  if sfind(job, f.quoted, e + 1, true) then return nil end
  local pos = e + 1
  if f.index then
    -- args[index]: the elements before it must be plain strings or numbers too.
    for _ = 1, f.index - 1 do
      local _, ok = plain_value(job, pos)
      if not ok then return nil end
      pos = string.match(job, '^"[^"]*",()', pos) or string.match(job, '^[^,%]}"]*,()', pos)
      if not pos then return nil end
    end
    if string.byte(job, pos) == 93 then return '' end  -- ']': fewer args than index
  end
  local s = smatch(job, '^"([^"\\%c]*)"[,%]}]', pos)  -- the usual case: a plain string
  if s then
    if #s > 200 then s = ssub(s, 1, 200) end
    return s
  end
  return (plain_value(job, pos))
end

local function tenant_of(job, f)
  local t = scanned_tenant(job, f)
  if t then return t end
  return decoded_tenant(job, f)
end

-- Moves up to split_max jobs from the plain queue into the tenant lists, oldest first.
local function split(q, f)
  local groups, names = {}, {}
  -- One LRANGE and one LTRIM for the whole batch (oldest first: the list's right end).
  local got = redis.call('lrange', KEYS[q], -split_max, -1)
  if #got == 0 then return end
  redis.call('ltrim', KEYS[q], 0, -(#got + 1))
  for k = #got, 1, -1 do
    local job = got[k]
    local t = tenant_of(job, f)
    local g = groups[t]
    if not g then
      g = {}
      groups[t] = g
      names[#names + 1] = t
    end
    g[#g + 1] = job
  end
  -- Where each tenant's jobs go, decided before the first write.
  if wrong_type({f.ring, 'list', queues, 'set'}) then
    for k = 1, #got do redis.call('rpush', KEYS[q], got[k]) end
    return
  end
  local ringlen = redis.call('llen', f.ring)
  local popped
  do
    -- No TYPE per tenant: the LPUSH's reply (the list's length) says whether the list is new (its
    -- length is the pushed count). A tenant list of another type (someone else's key) refuses
    -- the LPUSH, and a new tenant beyond max_tenants has its list taken back at once (it holds
    -- only these jobs); their jobs take the careful path below, which sends them to the
    -- tenantless bucket or back to the plain queue. (Before, a TYPE per tenant ran whenever the
    -- ring might reach the cap within the batch: at 10,000 tenants, most splits.)
    -- The new tenants join the ring and `queues` together after the loop: one LPUSH and one
    -- SADD per 1,000 new tenants instead of one each per tenant (a split of 2,000 jobs of
    -- tenants with a few jobs each makes hundreds). Same order in the ring as one LPUSH each.
    local rest, joined, listed = {}, {}, {}
    for _, t in ipairs(names) do
      local g = groups[t]
      local first = math.min(1000, #g)
      local len = redis.pcall('lpush', f.list .. t, unpack(g, 1, first))
      if type(len) ~= 'number' then
        rest[#rest + 1] = t
      elseif len == first and t ~= '' and ringlen >= f.max then
        redis.call('del', f.list .. t)
        rest[#rest + 1] = t
      else
        for s = first + 1, #g, 1000 do
          redis.call('lpush', f.list .. t, unpack(g, s, math.min(s + 999, #g)))
        end
        if len == first then
          joined[#joined + 1] = t
          listed[#listed + 1] = f.queue .. t
          ringlen = ringlen + 1
        end
      end
    end
    for s = 1, #joined, 1000 do
      local e = math.min(s + 999, #joined)
      redis.call('lpush', f.ring, unpack(joined, s, e))
      redis.call('sadd', queues, unpack(listed, s, e))
    end
    if #rest == 0 then return end
    -- Only the refused tenants go on, their jobs grouped by tenant (oldest first in each).
    names = rest
    popped = {}
    for _, t in ipairs(rest) do
      for _, job in ipairs(groups[t]) do popped[#popped + 1] = job end
    end
  end
  local dest, fresh = {}, {}
  local function kind(t)
    if fresh[t] ~= nil then return fresh[t] and 'none' or 'list' end
    return redis.call('type', f.list .. t).ok
  end
  for _, t in ipairs(names) do
    local d = t
    local ty = kind(d)
    if (ty == 'none' and d ~= '' and ringlen >= f.max) or (ty ~= 'none' and ty ~= 'list') then
      d = ''
      ty = kind(d)
    end
    if ty ~= 'none' and ty ~= 'list' then
      -- Even the tenantless bucket is someone else's key: leave every job where it was.
      for k = #popped, 1, -1 do redis.call('rpush', KEYS[q], popped[k]) end
      return
    end
    if ty == 'none' and fresh[d] == nil then
      fresh[d] = true
      ringlen = ringlen + 1
    elseif fresh[d] == nil then
      fresh[d] = false
    end
    dest[t] = d
  end
  local added = {}
  for _, t in ipairs(names) do
    local g, d = groups[t], dest[t]
    for s = 1, #g, 1000 do
      redis.call('lpush', f.list .. d, unpack(g, s, math.min(s + 999, #g)))
    end
    if fresh[d] and not added[d] then
      added[d] = true
      redis.call('lpush', f.ring, d)
      redis.call('sadd', queues, f.queue .. d)
    end
  end
end

-- How many more jobs this script may take: ARGV[1] less those taken so far.
local taken = 0
-- Whether every queue order starts with queue q: then each of this script's next takes asks q
-- first, and a lone tenant's jobs taken ahead (f.stash) are all handed out by this script.
local function always_first(q)
  for o = 0, orders - 1 do
    if tonumber(ARGV[first + o * n + 1]) ~= q then return false end
  end
  return true
end

-- The ring is walked a stretch at a time instead of one LMOVE per job. f.view holds tenants
-- read from the ring's tail with one LRANGE (as LRANGE gives them: f.view[#f.view] is the
-- tail, served first; f.view[#f.view - k] the tenant k places before it); f.used of
-- them have had their turn in this call, in order: f.back are those that stay (rotated to the
-- head at the commit, as one LMOVE each would have), f.gone the Sidekiq queue names of those
-- whose list is empty (they leave the ring and `queues`), f.reset the weighted tenants whose
-- turn is over (their count leaves the served hash). f.cur is the tenant whose turn is under
-- way (f.view[#f.view - f.used]) and f.count the jobs it has had in this turn. The three
-- lists are made on first use: a call of a few jobs (basic fetch) pays for no empty table.
-- commit writes all that back: one LTRIM and one LPUSH of the ring, one SREM, one HDEL, and an
-- HSET for a weighted tenant whose turn goes on into the next call. The script is atomic, so
-- nobody sees the ring between the reads and the commit; it runs before the script returns
-- (finish) and whenever the view is used up.
local function commit(f)
  if not f.view then return end
  if f.rotated then
    -- A one-job call read its tenant with an LMOVE to the head (below): it stays there, leaves
    -- from there, or goes back to the tail when its weighted turn goes on.
    if f.gone then
      redis.call('lpop', f.ring)
    elseif not f.back then
      redis.call('lmove', f.ring, f.ring, 'LEFT', 'RIGHT')
    end
  elseif f.used == 1 then
    -- One tenant's turn: one call instead of two.
    if f.back then redis.call('lmove', f.ring, f.ring, 'RIGHT', 'LEFT') else redis.call('rpop', f.ring) end
  elseif f.used > 0 then
    redis.call('ltrim', f.ring, 0, -(f.used + 1))
    if f.back then redis.call('lpush', f.ring, unpack(f.back)) end
  end
  -- After the pops nothing may fail: the served hash and the queues set, someone else's keys at
  -- worst, are written with pcall (a served hash that is not one makes a weight count within a
  -- call only).
  if f.cur and f.count > 0 and (f.weights[f.cur] or 1) > 1 then
    redis.pcall('hset', f.served, f.cur, f.count)
  end
  if f.gone then redis.pcall('srem', queues, unpack(f.gone)) end
  if f.reset then redis.pcall('hdel', f.served, unpack(f.reset)) end
  f.view, f.cur, f.back, f.gone, f.reset, f.rotated = nil, nil, nil, nil, nil, nil
end

-- The jobs a fair queue's takes moved (popped for a working list) go into it together at the
-- end, in the order taken: one LPUSH per 1,000 jobs where one RPOPLPUSH per job inserted each
-- at the head of the working list's first node (a memmove of that node each time, ~3x an RPOP
-- here). The script is atomic, so nobody sees the jobs between their pop and this push, and
-- the push cannot fail: the guard checked every working list's type.
local function flush_moved(f)
  local moved = f.moved
  if not moved or #moved == 0 then return end
  for s = 1, #moved, 1000 do
    redis.call('lpush', f.move, unpack(moved, s, math.min(s + 999, #moved)))
  end
  f.moved = nil
end

local function finish()
  for _, f in pairs(fair) do
    commit(f)
    flush_moved(f)
  end
end

-- Tenant f.cur's turn is over: it goes to the ring's head, or leaves the ring when its list is
-- empty (eagerly: a split adds a tenant whose list is missing to the ring, so an emptied tenant
-- left in it would get two turns).
-- (f.back, f.gone and f.reset are made on first use: most calls need one or none of them.)
local function note(f, field, v)
  local list = f[field]
  if not list then
    list = {}
    f[field] = list
  end
  list[#list + 1] = v
end
local function end_turn(f, empty)
  local t = f.cur
  f.used = f.used + 1
  if empty then note(f, 'gone', f.queue .. t) else note(f, 'back', t) end
  if (f.weights[t] or 1) > 1 then note(f, 'reset', t) end
  f.cur = nil
end

-- A lone tenant t (the whole ring): nobody joins the ring before the next split (the next
-- script), so the rest of this batch comes from its list in one LRANGE + LTRIM (+ LPUSH into
-- the working list), oldest first, instead of two calls per job. always_first: every job taken
-- ahead is returned by this script.
local function take_lone(f, t, list, got, move)
  redis.call('ltrim', list, 0, -(#got + 1))
  if move then
    -- Oldest first, as one RPOPLPUSH after another would leave them.
    for k = #got, 1, -1 do f.moved[#f.moved + 1] = got[k] end
  end
  if redis.call('llen', list) == 0 then
    f.cur = t
    end_turn(f, true)
  end
  local job = got[#got]
  got[#got] = nil
  if #got > 0 then f.stash = got end
  return job
end

-- The next job of queue q: the ring's current tenant's oldest job; moved into `move` (a
-- working list) or popped.
local function take_job(q, move)
  local f = fair[q]
  if not f then
    if move then return redis.call('rpoplpush', KEYS[q], move) end
    return redis.call('rpop', KEYS[q])
  end
  if not f.split then
    f.split = true
    split(q, f)
    if move then f.move, f.moved = move, {} end
  end
  if f.stash then
    local job = f.stash[#f.stash]
    f.stash[#f.stash] = nil
    if #f.stash == 0 then f.stash = nil end
    return job
  end
  local rest = tonumber(ARGV[1]) - taken
  while true do
    if not f.cur then
      if f.view and f.used >= #f.view then commit(f) end
      if not f.view then
        -- The next stretch of the ring, enough for the rest of this batch at one job a tenant.
        local view
        if rest == 1 then
          -- One job (basic fetch's usual call): rotate and read the tenant in one LMOVE.
          local t = redis.call('lmove', f.ring, f.ring, 'RIGHT', 'LEFT')
          if not t then return false end
          view = {t}
          f.rotated = true
        else
          view = redis.call('lrange', f.ring, -math.min(rest, 1000), -1)
          if #view == 0 then return false end
        end
        f.view, f.used = view, 0
        local t = view[1]
        if rest > 1 and #view == 1 and always_first(q) then
          -- Read with pcall: a list of another type (someone else's key) answers an error,
          -- and a missing one nothing; both take the usual path below, which drops the tenant.
          local jobs = redis.pcall('lrange', f.list .. t, -rest, -1)
          if jobs.err == nil and #jobs > 0 then return take_lone(f, t, f.list .. t, jobs, move) end
        end
      end
      f.cur = f.view[#f.view - f.used]
      f.count = 0
      if (f.weights[f.cur] or 1) > 1 then
        f.count = tonumber(redis.pcall('hget', f.served, f.cur)) or 0
      end
    end
    local t = f.cur
    local list = f.list .. t
    local job = redis.pcall('rpop', list)
    if type(job) == 'table' then job = false end  -- not a list any more: forget the tenant
    if job and move then f.moved[#f.moved + 1] = job end
    if job and redis.call('llen', list) > 0 then
      f.count = f.count + 1
      -- With weights, the tenant keeps its turn for W jobs in a row (deficit round robin).
      if f.count >= (f.weights[t] or 1) then end_turn(f, false) end
      return job
    end
    -- Its list is empty (now or before this pop): it leaves the ring.
    end_turn(f, true)
    if job then return job end
  end
end

local function take(q, move)
  local job = take_job(q, move)
  if job then taken = taken + 1 end
  return job
end

)lua" KIQD_BATCH_FETCH_LOOP;

}  // namespace

const char* FairFetch::script_source() {
    return kFairFetchScript;
}

FairFetch::FairFetch(const Keys& keys, const QueueOrder& order, const FairFetchConfig& config)
    : order_(order), script_(kFairFetchScript) {
    std::vector<std::string> per_queue;
    size_t count = 0;
    const auto& names = order_.names();
    for (size_t i = 0; i < names.size(); ++i) {
        const FairFetchQueue* f = config.find(names[i]);
        if (!f) continue;
        ++count;
        per_queue.push_back(std::to_string(i + 1));
        per_queue.push_back(f->arg ? "arg" : "key");
        per_queue.push_back(f->arg ? std::to_string(*f->arg) : f->key);
        per_queue.push_back(std::to_string(f->max_tenants));
        per_queue.push_back(f->queue);
        per_queue.push_back(std::to_string(f->weights.size()));
        for (const auto& [tenant, weight] : f->weights) {
            per_queue.push_back(tenant);
            per_queue.push_back(std::to_string(weight));
        }
    }
    spec_ = {keys.prefix(), std::to_string(kSplitMax), std::to_string(count)};
    spec_.insert(spec_.end(), per_queue.begin(), per_queue.end());
}

void FairFetch::fair_args(std::vector<std::string>& args) const {
    // [count, n, orders...] → [count, n, m, orders..., spec...]
    const size_t n = order_.names().size();
    const size_t m = n ? (args.size() - 2) / n : 0;
    args.insert(args.begin() + 2, std::to_string(m));
    args.insert(args.end(), spec_.begin(), spec_.end());
}

std::optional<UnitOfWork> FairFetch::take_one(redis::Connection& conn, std::mt19937_64& rng,
                                              std::vector<redis::Command>& pending,
                                              const std::vector<std::string>& keys) const {
    auto units = take(conn, rng, pending, keys, 1);
    if (units.empty()) return std::nullopt;
    return std::move(units.front());
}

std::vector<UnitOfWork> FairFetch::take(redis::Connection& conn, std::mt19937_64& rng,
                                        std::vector<redis::Command>& pending,
                                        const std::vector<std::string>& keys, size_t count) const {
    thread_local std::vector<std::string> args;
    batch_order_args(order_, rng, count, args);
    fair_args(args);
    return batch_units(script_.run_after(conn, &pending, keys, args), order_.names());
}

}  // namespace kiqd
