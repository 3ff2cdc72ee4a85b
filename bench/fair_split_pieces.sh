#!/usr/bin/env bash
# What one split of fair fetch costs Redis per job, piece by piece: 2,000 payloads of
# fair_fetch_cost.sh's shape in a list, read by EVALSHA REPS times with the split's steps added
# one at a time. The tenant scan is the fetch script's own code, cut out of
# src/fetch/fair_fetch.cpp (from "-- The job's tenant" to the end of tenant_of), so the numbers
# follow the source. Two lists: G, one tenant's 2,000 jobs (a greedy backlog), and S, 2,000
# tenants with one job each (small tenants, as a split sees them when they push in turn).
#
#   bench/fair_split_pieces.sh          REPS=100
#
# Steps, each including the ones before it:
#   lrange   LRANGE of the 2,000 jobs into Lua
#   scan     + the tenant of each job
#   group    + the jobs grouped by tenant (a table per tenant)
#   push     + one LPUSH per tenant into its own list, then its DEL (a turn deletes it too)
# and, apart:
#   copy       LRANGE plus one LPUSH of all 2,000 into one list and its DEL (the cost of moving
#              the jobs in bulk, without finding their tenants);
#   newcomers  a sketch of a shape fair fetch does not have (docs/fair-fetch.md, "What reaching
#              the target would take"): the tenants with one job and no list join through one
#              shared list. `group`, then one SMISMEMBER of the split's tenants against a set of
#              pending newcomers, one LPUSH of the single jobs into the shared list, one SADD
#              and one ring LPUSH of their names; then the DELs;
#   rounds     a sketch of another data model (docs/fair-fetch.md, "A bound"): jobs wait in
#              lists of rounds, one job per tenant per round, so that a turn is a plain pop.
#              `group`, then the current round (GET) and the tenants' next rounds (HMGET), each
#              tenant's jobs given to rounds from its next one on, up to 8 rounds ahead (the
#              rest wait in a list of its own and join a set of such tenants), one LPUSH per
#              round, the rounds' names added to `queues`, the next rounds written back (HSET);
#              then the DELs. Leaves out moving a waiting job into a round when rounds advance;
#   read       the 2,000 jobs read by a client (LRANGE), in Redis CPU time: what it would cost
#              Redis if kiqd found the tenants itself.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "fair_split_pieces: $*" >&2; exit 1; }
REPS=${REPS:-100}
work=$(mktemp -d "${TMPDIR:-/tmp}/kiqd-pieces.XXXXXX")
redis_pid="" drain_pid=""
source "$here/lib/cleanup.sh"
source "$here/lib/redis.sh"
source "$here/lib/fair_lua.sh"
fair_lua_from_scan_to tenant_of >"$work/tenant_scan.lua" || die "cannot cut the scan out of fair_fetch.cpp"
start_redis "$(/usr/bin/python3 "$here/lib/kiqbench.py" freeport)" "$work"
# The two lists, in the bench's payload shape (bench/lib/push_jobs.py pushes to queue:default).
/usr/bin/python3 "$here/lib/push_jobs.py" Kiqd::Noop 2000 0 1 | rcli --pipe >/dev/null
rcli rename queue:default G >/dev/null
/usr/bin/python3 "$here/lib/push_jobs.py" Kiqd::Noop 0 2000 1 | rcli --pipe >/dev/null
rcli rename queue:default S >/dev/null
# The bodies: each reads KEYS[1] and returns; `f` is a fair queue with {arg: 0}, as the script
# builds it.
read_jobs="local got = redis.call('lrange', KEYS[1], 0, -1)"
group="local groups, names = {}, {}
for k = #got, 1, -1 do
  local job = got[k]
  local t = tenant_of(job, f)
  local g = groups[t]
  if not g then g = {}; groups[t] = g; names[#names + 1] = t end
  g[#g + 1] = job
end"
declare -A bodies=(
    [lrange]="$read_jobs
return #got"
    [scan]="$read_jobs
local n = 0
for k = #got, 1, -1 do if tenant_of(got[k], f) then n = n + 1 end end
return n"
    [group]="$read_jobs
$group
return #names"
    [push]="$read_jobs
$group
for _, t in ipairs(names) do
  local g = groups[t]
  in_chunks('lpush', 'scratch:' .. t, g)
  redis.call('del', 'scratch:' .. t)
end
return #names"
    [newcomers]="$read_jobs
$group
local member = redis.call('smismember', 'pending', unpack(names))
local jobs, joined = {}, {}
for k, t in ipairs(names) do
  local g = groups[t]
  if member[k] == 0 and #g == 1 then
    jobs[#jobs + 1] = g[1]
    joined[#joined + 1] = t
  else
    redis.call('lpush', 'scratch:' .. t, unpack(g))
    redis.call('del', 'scratch:' .. t)
  end
end
for s = 1, #jobs, 1000 do
  local e = math.min(s + 999, #jobs)
  redis.call('lpush', 'newcomers', unpack(jobs, s, e))
  redis.call('sadd', 'pending', unpack(joined, s, e))
  redis.call('lpush', 'ring', unpack(joined, s, e))
end
redis.call('del', 'newcomers', 'pending', 'ring')
return #names"
    [rounds]="$read_jobs
$group
local ahead = 8
local cur = tonumber(redis.call('get', 'rounds:cur')) or 0
local nexts = {}
for s = 1, #names, 1000 do
  local part = redis.call('hmget', 'rounds:next', unpack(names, s, math.min(s + 999, #names)))
  for k = 1, #part do nexts[s + k - 1] = part[k] end
end
local byround, order, waiting, written = {}, {}, {}, {}
for k, t in ipairs(names) do
  local g = groups[t]
  local r = math.max(tonumber(nexts[k]) or cur, cur)
  for j = 1, #g do
    if r >= cur + ahead then
      local w = waiting[t]
      if not w then w = {}; waiting[t] = w end
      w[#w + 1] = g[j]
    else
      local b = byround[r]
      if not b then b = {}; byround[r] = b; order[#order + 1] = r end
      b[#b + 1] = g[j]
      r = r + 1
    end
  end
  written[#written + 1] = t
  written[#written + 1] = r
end
local listed = {}
for _, r in ipairs(order) do
  in_chunks('lpush', 'round:' .. r, byround[r])
  listed[#listed + 1] = 'default@r:' .. r
end
if #listed > 0 then redis.call('sadd', 'queues', unpack(listed)) end
for t, w in pairs(waiting) do
  in_chunks('lpush', 'wait:' .. t, w)
  redis.call('sadd', 'waiting', t)
end
in_chunks('hset', 'rounds:next', written)
for _, r in ipairs(order) do redis.call('del', 'round:' .. r) end
for t in pairs(waiting) do redis.call('del', 'wait:' .. t) end
redis.call('del', 'rounds:next', 'waiting', 'queues')
return #names"
    [copy]="$read_jobs
in_chunks('lpush', 'scratch', got)
redis.call('del', 'scratch')
return #got"
)
echo "µs of Redis per job (EVALSHA time / 2000), REPS=$REPS"
printf '%-10s %8s %8s\n' step G S
for step in lrange scan group push copy newcomers rounds; do
    {
        echo "local f = {mode = 'arg', field = '0', index = 1, marker = '\"args\":[',"
        echo "           quoted = '\"args\"', weights = {}}"
        # One command per 1,000 items, as the fetch script writes its lists.
        echo "local function in_chunks(cmd, key, items)"
        echo "  for s = 1, #items, 1000 do redis.call(cmd, key, unpack(items, s, math.min(s + 999, #items))) end"
        echo "end"
        cat "$work/tenant_scan.lua"
        echo "${bodies[$step]}"
    } >"$work/$step.lua"
    sha=$(rcli script load "$(cat "$work/$step.lua")")
    row=$(printf "%-10s" "$step")
    for key in G S; do
        rcli config resetstat >/dev/null
        rcli -r "$REPS" evalsha "$sha" 1 "$key" >/dev/null
        us=$(rcli info commandstats | tr -d '\r' | awk -F'[:,=]' '/^cmdstat_evalsha:/ {print $7}')
        row+=$(printf ' %8.3f' "$(/usr/bin/python3 -c "print($us / 2000)")")
    done
    echo "$row"
done
# What the same 2,000 jobs cost Redis when a client reads them (LRANGE over the socket): if kiqd
# found the tenants itself, it would first read each job once this way. Redis's CPU time (user +
# system) rather than commandstats, which leaves out writing the reply to the socket.
cpu() { rcli info cpu | tr -d '\r' | awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "%.6f", s}'; }
row=$(printf "%-10s" "read")
for key in G S; do
    c0=$(cpu)
    rcli -r "$REPS" lrange "$key" 0 -1 >/dev/null
    c1=$(cpu)
    row+=$(printf ' %8.3f' "$(/usr/bin/python3 -c "print(1e6 * ($c1 - $c0) / ($REPS * 2000))")")
done
echo "$row   (by a client, Redis CPU)"
