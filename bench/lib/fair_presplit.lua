-- bench/fair_fetch_cost.sh PRESPLIT=greedy|all: fair fetch's split done before the clock starts,
-- leaving what the fetch script's split leaves (src/fetch/fair_fetch.cpp): each tenant's jobs in
-- queue:default@t:<tenant>, oldest at the tail; the ring kiqd:fair:default:ring with the tenants
-- in the order their first job was found (the tail is served first); each tenant list's name in
-- `queues`. The tenant is args[1], read with cjson (the bench's payloads are plain JSON).
--   ARGV[1]  greedy: only the oldest GREEDY jobs (the greedy tenant's backlog, the list's tail);
--            all: every job
--   ARGV[2]  GREEDY
-- Returns how many tenants joined the ring.
local q = 'queue:default'
local ring = 'kiqd:fair:default:ring'
local got
if ARGV[1] == 'greedy' then
  got = redis.call('lrange', q, -tonumber(ARGV[2]), -1)
else
  got = redis.call('lrange', q, 0, -1)
end
redis.call('ltrim', q, 0, -(#got + 1))
local groups, names = {}, {}
for k = #got, 1, -1 do
  local t = cjson.decode(got[k]).args[1]
  local g = groups[t]
  if not g then
    g = {}
    groups[t] = g
    names[#names + 1] = t
  end
  g[#g + 1] = got[k]
end
for _, t in ipairs(names) do
  local g = groups[t]
  for s = 1, #g, 1000 do
    redis.call('lpush', q .. '@t:' .. t, unpack(g, s, math.min(s + 999, #g)))
  end
end
for s = 1, #names, 1000 do
  local e = math.min(s + 999, #names)
  local listed = {}
  for k = s, e do listed[#listed + 1] = 'default@t:' .. names[k] end
  redis.call('lpush', ring, unpack(names, s, e))
  redis.call('sadd', 'queues', unpack(listed))
end
return #names
