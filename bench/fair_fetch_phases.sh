#!/usr/bin/env bash
# Where a fetch script's Redis time goes over a drain, call by call (issue 24): the workload of
# bench/fair_fetch_cost.sh (one greedy tenant's GREEDY no-op jobs, then TENANTS tenants ×
# PER_TENANT, tenant in args[0]), drained once by BINARY with a plain queue or with fair fetch,
# while Redis's SLOWLOG records every command of at least 10 µs (the fetch scripts; the per-job
# acknowledgements take ~2 µs and stay out). Prints the script calls' Redis time in order, by
# phase: the first ceil(jobs / 2000) calls (while a fair queue's plain list still held jobs to
# split: 2000 a call), then the rest in CHUNKS equal parts. Run plain and fair with the same
# FETCH and compare phase by phase: a fair phase that costs more than plain's is what to cut.
#
#   bench/fair_fetch_phases.sh BINARY plain|fair [basic|batched]
#   GREEDY=100000 TENANTS=10000 PER_TENANT=3 CONCURRENCY=10 CHUNKS=3
#
# Calls under 10 µs are not recorded; the line "recorded N of M calls" says how many were (all
# of them with batched fetch, whose calls take 50 jobs; most with basic fetch). A plain queue
# with basic fetch takes its jobs with BRPOP, not a script: compare with fair_fetch_cost.sh's
# STATS=1 there.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "fair_fetch_phases: $*" >&2; exit 1; }
[[ $# -ge 2 ]] || die "usage: bench/fair_fetch_phases.sh BINARY plain|fair [basic|batched]"
binary=$(realpath "$1") mode=$2 fetch=${3:-batched}
[[ -x $binary ]] || die "not an executable: $1"
[[ $mode == plain || $mode == fair ]] || die "mode is plain or fair, not $mode"
[[ $fetch == basic || $fetch == batched ]] || die "FETCH is basic or batched, not $fetch"
GREEDY=${GREEDY:-100000} TENANTS=${TENANTS:-10000} PER_TENANT=${PER_TENANT:-3}
CONCURRENCY=${CONCURRENCY:-10} CHUNKS=${CHUNKS:-3}
total=$((GREEDY + TENANTS * PER_TENANT))
work=$(mktemp -d "${TMPDIR:-/tmp}/kiqd-phases.XXXXXX")
redis_pid="" drain_pid=""
source "$here/lib/cleanup.sh"
source "$here/lib/redis.sh"
start_redis "$(/usr/bin/python3 "$here/lib/kiqbench.py" freeport)" "$work"
{
    echo "redis: {url: \"$redis_url\"}"
    echo "logging: {level: warn}"
    echo "concurrency: $CONCURRENCY"
    echo "queues: [default]"
    [[ $fetch == batched ]] && echo "fetch: reliable"
    [[ $mode == fair ]] && echo "fair_fetch: {default: {arg: 0}}"
} >"$work/kiqd.yml"
/usr/bin/python3 "$here/lib/push_jobs.py" Kiqd::Noop "$GREEDY" "$TENANTS" "$PER_TENANT" |
    rcli --pipe >/dev/null
[[ $(rcli llen queue:default) == "$total" ]] || die "push failed"
# Enough entries for every script call of a basic drain (~0.3 a job) and the odd slow command.
rcli config set slowlog-max-len $((total / 2 + 1000)) >/dev/null
rcli config set slowlog-log-slower-than 10 >/dev/null
rcli slowlog reset >/dev/null
rcli config resetstat >/dev/null
"$binary" -C "$work/kiqd.yml" >"$work/kiqd.log" 2>&1 &
drain_pid=$!
# Done when the plain queue and the ring are empty (a tenant leaves the ring when its list
# empties), as in fair_fetch_cost.sh.
while :; do
    left=$(rcli eval "return redis.call('llen', KEYS[1]) + redis.call('llen', KEYS[2])" 2 \
        queue:default kiqd:fair:default:ring)
    [[ $left == 0 ]] && break
    kill -0 "$drain_pid" 2>/dev/null || die "kiqd exited: $(tail -5 "$work/kiqd.log")"
    sleep 0.01
done
kill -TERM "$drain_pid"
wait "$drain_pid" || true
drain_pid=""
calls=$(rcli info commandstats | tr -d '\r' | awk -F'[:,=]' '/^cmdstat_evalsha:/ {print $3}')
rcli --json slowlog get -1 >"$work/slowlog.json"
/usr/bin/python3 - "$work/slowlog.json" "$total" "${calls:-0}" "$CHUNKS" "$mode" "$fetch" <<'PY'
import json, math, sys

path, total, calls, chunks, mode, fetch = sys.argv[1:]
total, calls, chunks = int(total), int(calls), int(chunks)
# SLOWLOG GET: newest first; each entry [id, time, µs, [command, args...], client, name].
entries = sorted(json.load(open(path)), key=lambda e: e[0])
script_us = [e[2] for e in entries if e[3] and e[3][0].lower() == "evalsha"]
print(f"{mode}, {fetch} fetch: {total} jobs; recorded {len(script_us)} of {calls} script calls,"
      f" {sum(script_us) / 1000:.1f} ms of Redis time")
split_calls = math.ceil(total / 2000)
bounds = [(0, split_calls, f"calls 1-{split_calls} (a fair queue splits its plain list here)")]
rest = len(script_us) - split_calls
for k in range(chunks):
    a = split_calls + rest * k // chunks
    b = split_calls + rest * (k + 1) // chunks
    bounds.append((a, b, f"calls {a + 1}-{b}"))
for a, b, label in bounds:
    part = script_us[a:b]
    if part:
        print(f"  {label}: {sum(part) / 1000:.1f} ms, {sum(part) / len(part):.1f} µs a call")
PY
