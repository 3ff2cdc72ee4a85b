#include "fetch/fair_drain.hpp"

#include <cstdlib>

#include "fetch/fair_fetch.hpp"
#include "kiqd/redis/script.hpp"
#include "redis/lua_type_guard.hpp"

namespace kiqd {
namespace {

// KEYS[1] queue:<q>  KEYS[2] the ring  KEYS[3] the served hash  KEYS[4] the queues set
// ARGV[1] the queue's name
// Returns the number of jobs moved. A WRONGTYPE error, and nothing moved, when a key holds
// another type.
const char* const kDrainScript = KIQD_LUA_TYPE_GUARD R"lua(
local refused = wrong_type({KEYS[1], 'list', KEYS[2], 'list', KEYS[3], 'hash', KEYS[4], 'set'})
if refused then return refused end
local tenants = redis.call('lrange', KEYS[2], 0, -1)
-- The tenantless bucket, even if the ring lost it.
local seen, lists = {}, {}
tenants[#tenants + 1] = ''
for _, t in ipairs(tenants) do
  if not seen[t] then
    seen[t] = true
    local key = KEYS[1] .. '@t:' .. t
    if redis.call('type', key).ok == 'list' then lists[#lists + 1] = {t, key} end
  end
end
local all = {}
for li, l in ipairs(lists) do
  local items = redis.call('lrange', l[2], 0, -1)  -- newest first
  local at = 0
  local pos = 0
  for k = #items, 1, -1 do                         -- oldest first
    local ok, p = pcall(cjson.decode, items[k])
    if ok and type(p) == 'table' and type(p['enqueued_at']) == 'number' then
      at = p['enqueued_at']
    end
    pos = pos + 1
    all[#all + 1] = {at, li, pos, items[k]}
  end
end
table.sort(all, function(a, b)
  if a[1] ~= b[1] then return a[1] < b[1] end
  if a[2] ~= b[2] then return a[2] < b[2] end
  return a[3] < b[3]
end)
-- The oldest ends at the popping end (the right), ahead of the plain list's own jobs.
local chunk = {}
for k = #all, 1, -1 do
  chunk[#chunk + 1] = all[k][4]
  if #chunk == 1000 then
    redis.call('rpush', KEYS[1], unpack(chunk))
    chunk = {}
  end
end
if #chunk > 0 then redis.call('rpush', KEYS[1], unpack(chunk)) end
for _, l in ipairs(lists) do
  redis.call('del', l[2])
  redis.call('srem', KEYS[4], ARGV[1] .. '@t:' .. l[1])
end
for _, t in ipairs(tenants) do redis.call('srem', KEYS[4], ARGV[1] .. '@t:' .. t) end
redis.call('del', KEYS[2], KEYS[3])
return #all
)lua";

// KEYS[1] queue:<q>  KEYS[2] the ring;  ARGV[1] how many tenants to list
// Returns {unsplit, other_tenants, other_jobs, tenant, jobs, oldest enqueued_at, ...}.
const char* const kBacklogScript = R"lua(
local tenants = redis.call('lrange', KEYS[2], 0, -1)
local rows = {}
for _, t in ipairs(tenants) do
  rows[#rows + 1] = {t, redis.call('llen', KEYS[1] .. '@t:' .. t)}
end
table.sort(rows, function(a, b)
  if a[2] ~= b[2] then return a[2] > b[2] end
  return a[1] < b[1]
end)
local top = tonumber(ARGV[1])
local out = {redis.call('llen', KEYS[1]), 0, 0}
for k, r in ipairs(rows) do
  if k <= top then
    local at = ''
    local head = redis.call('lindex', KEYS[1] .. '@t:' .. r[1], -1)
    if head then
      local ok, p = pcall(cjson.decode, head)
      if ok and type(p) == 'table' and type(p['enqueued_at']) == 'number' then
        at = string.format('%.6f', p['enqueued_at'])
      end
    end
    out[#out + 1] = r[1]
    out[#out + 1] = r[2]
    out[#out + 1] = at
  else
    out[2] = out[2] + 1
    out[3] = out[3] + r[2]
  end
end
return out
)lua";

}  // namespace

long long drain_fair_queue(redis::Connection& conn, const Keys& keys, const std::string& queue) {
    static const redis::Script script(kDrainScript);
    auto reply = script.run(conn,
                            {keys.queue(queue), FairFetch::ring_key(keys, queue),
                             FairFetch::served_key(keys, queue), keys.queues()},
                            {queue});
    if (reply.is_error()) throw redis::ReplyError(std::string(reply.error_text()));
    return reply.integer();
}

bool has_fair_state(redis::Connection& conn, const Keys& keys, const std::string& queue) {
    return !with_fair_state(conn, keys, {queue}).empty();
}

std::vector<std::string> with_fair_state(redis::Connection& conn, const Keys& keys,
                                         const std::vector<std::string>& queues) {
    // One pipeline: asked one by one, 500 queues took 50 ms of round trips at start-up on
    // loopback (a tenth of a drain of 100,000 jobs), and more over a network.
    std::vector<redis::Command> checks;
    checks.reserve(queues.size());
    for (const auto& q : queues)
        checks.push_back(
            {"EXISTS", FairFetch::ring_key(keys, q), keys.queue(FairFetch::tenant_queue(q, ""))});
    const auto replies = conn.pipeline(checks);
    std::vector<std::string> out;
    for (size_t i = 0; i < queues.size(); ++i)
        if (replies[i].integer() > 0) out.push_back(queues[i]);
    return out;
}

FairQueueBacklog fair_backlog(redis::Connection& conn, const Keys& keys, const std::string& queue,
                              size_t top_n) {
    static const redis::Script script(kBacklogScript);
    auto reply = script.run(conn, {keys.queue(queue), FairFetch::ring_key(keys, queue)},
                            {std::to_string(top_n)});
    if (reply.is_error()) throw redis::ReplyError(std::string(reply.error_text()));
    if (reply.size() < 3 || (reply.size() - 3) % 3) reply.unexpected("fair backlog: bad reply");
    FairQueueBacklog out;
    out.queue = queue;
    out.unsplit = reply[0].integer();
    out.other_tenants = reply[1].integer();
    out.other_jobs = reply[2].integer();
    for (size_t i = 3; i + 2 < reply.size(); i += 3) {
        FairTenantBacklog t;
        t.tenant = std::string(reply[i].str());
        t.jobs = reply[i + 1].integer();
        const std::string at(reply[i + 2].str());
        t.oldest_enqueued_at = at.empty() ? 0 : std::strtod(at.c_str(), nullptr);
        out.top.push_back(std::move(t));
    }
    return out;
}

}  // namespace kiqd
