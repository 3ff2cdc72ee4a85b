#!/usr/bin/env bash
# Idle latency with many queues: enqueue -> start of Test::Record jobs pushed at a low, paced
# rate (1 job/s by default), each to a queue drawn at random among the configured ones, with 1
# and with 500 queues configured, basic fetch and batched reliable fetch. Runs alone:
#
#   bench/many_queues_latency.sh
#   BEFORE=/work/other/build/tests/kiqd_test_daemon bench/many_queues_latency.sh  # + rows of another build
#
# Environment:
#   RATE=1            jobs per second
#   SECONDS_EACH=60   seconds of pushing per row (RATE x SECONDS_EACH jobs)
#   CONCURRENCY=10    worker concurrency (-c)
#   QUEUES="1 500"    configured queues q0..q<N-1>, weight i mod 3 + 1
#   MODES="basic batched"  basic fetch; reliable fetch with batch_size 50
#   DAEMON=build/tests/kiqd_test_daemon  the worker (kiqd with the Test::Record handler, which
#                     records its start time); BEFORE: a second one, rows labelled "before"
#   RESULTS=bench/results/many_queues_latency.jsonl  one JSON line per row
#
# Method: a private redis-server (127.0.0.1, free port, no persistence, stopped by PID). Per row:
# FLUSHALL, start the worker, wait for its first heartbeat and 1 s more, then push the jobs
# one LPUSH each at their due time, stamped with enqueued_at just before the push; start is
# the handler's first line (kiqbench.py latency). p50/p99/max over the row's jobs.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
RATE=${RATE:-1}
SECONDS_EACH=${SECONDS_EACH:-60}
CONCURRENCY=${CONCURRENCY:-10}
QUEUES=${QUEUES:-"1 500"}
MODES=${MODES:-"basic batched"}
DAEMON=${DAEMON:-$repo/build/tests/kiqd_test_daemon}
BEFORE=${BEFORE:-}
RESULTS=${RESULTS:-$here/results/many_queues_latency.jsonl}

die() { echo "many_queues_latency: $*" >&2; exit 1; }
[[ -x $DAEMON ]] || die "no worker at $DAEMON (configure with -DBUILD_TESTING=ON)"
[[ -z $BEFORE || -x $BEFORE ]] || die "no worker at $BEFORE"

work=$(mktemp -d "${TMPDIR:-/tmp}/kiqd-many-queues-latency.XXXXXX")
pids=()
cleanup() {
    local rc=$?
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
source "$here/lib/redis.sh"
start_redis "$(/usr/bin/python3 "$here/lib/kiqbench.py" freeport)" "$work"
pids+=("$redis_pid")
mkdir -p "$(dirname "$RESULTS")"
: >"$RESULTS"

queue_list() {  # N: the YAML flow list of N weighted queues
    local n=$1 i out=""
    for ((i = 0; i < n; i++)); do out+="${out:+, }[q$i, $((i % 3 + 1))]"; done
    echo "[$out]"
}

echo "many_queues_latency: $RATE job/s for ${SECONDS_EACH}s per row, c=$CONCURRENCY, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for n in $QUEUES; do
    for mode in $MODES; do
        cfg=$work/kiqd-$mode-$n.yml
        printf 'redis: {url: "redis://127.0.0.1:%s/0"}\nlogging: {level: warn}\nqueues: %s\n' \
            "$port" "$(queue_list "$n")" >"$cfg"
        [[ $mode == batched ]] && printf 'fetch: reliable\nreliable_fetch: {batch_size: 50}\n' >>"$cfg"
        rows=("kiqd $mode|$DAEMON")
        [[ -n $BEFORE ]] && rows=("kiqd $mode (before)|$BEFORE" "${rows[@]}")
        for row in "${rows[@]}"; do
            IFS='|' read -r label bin <<<"$row"
            rcli flushall >/dev/null
            /usr/bin/python3 "$here/lib/kiqbench.py" latency --port "$port" --rate "$RATE" \
                --seconds "$SECONDS_EACH" --queues "$n" --label "$label" \
                --concurrency "$CONCURRENCY" --log "$work/worker.log" --cwd "$work" \
                --extra "{\"queues\":$n,\"mode\":\"$mode\"}" \
                -- "$bin" -C "$cfg" -c "$CONCURRENCY" >"$work/one.json" ||
                { tail -n 20 "$work/worker.log" >&2; die "run failed: $label, $n queues"; }
            cat "$work/one.json" >>"$RESULTS"
            /usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("  %-22s %3d queues  p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms" % (r["system"], r["queues"], r["p50_ms"], r["p99_ms"], r["max_ms"]))' "$work/one.json" >&2
        done
    done
done
echo "many_queues_latency: load after $(cut -d' ' -f1-3 /proc/loadavg); results in $RESULTS" >&2
