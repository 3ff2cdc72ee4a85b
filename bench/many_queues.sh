#!/usr/bin/env bash
# Many queues: how fast kiqd and Sidekiq drain no-op jobs spread over 1, 50 and 500 queues of
# weights 1-3, and over 500 queues of which only 5 have jobs. Called by bench/run (section
# "queues"); runs alone too:
#
#   bench/many_queues.sh
#   KIQD_BEFORE=/tmp/kiqd-old bench/many_queues.sh   # also rows for another kiqd build
#   WHAT=latency bench/many_queues.sh                # idle latency instead (below)
#
# Environment:
#   JOBS=20000                jobs per run, spread at random (seeded) over the filled queues
#   CONCURRENCY=10            worker concurrency (-c)
#   CASES="1/1 50/50 500/500 500/5"  queues/filled: N configured queues (q0..q<N-1>, weight
#                             i mod 3 + 1), jobs in the first `filled` of them
#   KIQD=build/kiqd           kiqd binary; KIQD_BEFORE: a second binary, rows labelled "before"
#   MODES="basic batched"     kiqd rows: basic fetch, reliable fetch with batch_size 50
#   SIDEKIQ=auto              Debian's Sidekiq 6.4.1 (quiet logging); "none" skips it
#   SIDEKIQ_CASES="1/1 50/50 500/500"  the cases Sidekiq runs (it is slow at 500 queues)
#   SIDEKIQ_JOBS=$JOBS        jobs per Sidekiq run (it drains about 1,000 a second at 500 queues)
#   REPEAT=1                  rounds of every case, interleaved (round 1 of each case, then
#                             round 2, ...); with more than one, a summary per row: the median
#                             jobs/s, and the median over rounds of each row's rate as a share of
#                             the same system's one-queue rate in that round
#   RESULTS=bench/results/many_queues.jsonl  one JSON line per run
#   WHAT=drain                drain, or latency: enqueue -> start at a low rate, with the
#                             variables below
#
# WHAT=latency: Test::Record jobs pushed one LPUSH each at their due time (RATE=1 job/s for
# SECONDS_EACH=60 s per row), each to a queue drawn at random among the configured ones, with
# 1 and 500 queues (QUEUES="1 500"; weights as above), MODES as above, CONCURRENCY as above.
# DAEMON=build/tests/kiqd_test_daemon runs them (kiqd with the Test::Record handler, which
# records its start time), DAEMON_BEFORE a second build ("before" rows). Each row: FLUSHALL,
# start the worker, wait for its first heartbeat and 1 s more, push; start is the handler's
# first line (kiqbench.py latency); p50/p99/max over the row's jobs. RESULTS defaults to
# bench/results/many_queues_latency.jsonl.
#
# Method: a private redis-server (127.0.0.1, free port, no persistence, stopped by PID). Per run:
# FLUSHALL, push, start the worker, poll the queues' total length (one script call every 20 ms)
# until every queue and working list is empty; jobs/s from worker start (so process start-up
# counts, as in bench/run's drain rows); worker and Redis CPU per job over the drain proper.
# kiqd and Sidekiq both log at warn (quiet).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
JOBS=${JOBS:-20000}
CONCURRENCY=${CONCURRENCY:-10}
CASES=${CASES:-"1/1 50/50 500/500 500/5"}
KIQD=${KIQD:-$repo/build/kiqd}
KIQD_BEFORE=${KIQD_BEFORE:-}
MODES=${MODES:-"basic batched"}
SIDEKIQ=${SIDEKIQ:-auto}
SIDEKIQ_CASES=${SIDEKIQ_CASES:-"1/1 50/50 500/500"}
SIDEKIQ_JOBS=${SIDEKIQ_JOBS:-$JOBS}
REPEAT=${REPEAT:-1}
WHAT=${WHAT:-drain}
RATE=${RATE:-1}
SECONDS_EACH=${SECONDS_EACH:-60}
QUEUES=${QUEUES:-"1 500"}
DAEMON=${DAEMON:-$repo/build/tests/kiqd_test_daemon}
DAEMON_BEFORE=${DAEMON_BEFORE:-}
if [[ $WHAT == latency ]]; then
    RESULTS=${RESULTS:-$here/results/many_queues_latency.jsonl}
else
    RESULTS=${RESULTS:-$here/results/many_queues.jsonl}
fi

die() { echo "many_queues: $*" >&2; exit 1; }
[[ $WHAT == drain || $WHAT == latency ]] || die "WHAT must be drain or latency, not $WHAT"
[[ $WHAT == latency || -x $KIQD ]] || die "no kiqd at $KIQD"
[[ $WHAT == drain || -x $DAEMON ]] || die "no worker at $DAEMON (configure with -DBUILD_TESTING=ON)"
sidekiq_bin=""
if [[ $SIDEKIQ != none ]] && ruby -e 'require "sidekiq"' >/dev/null 2>&1; then
    if [[ $SIDEKIQ == auto ]]; then sidekiq_bin=$(command -v sidekiq || true); else sidekiq_bin=$SIDEKIQ; fi
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/kiqd-many-queues.XXXXXX")
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
sidekiq_queues() {  # N: -q name,weight for each queue
    local n=$1 i
    for ((i = 0; i < n; i++)); do printf -- '-q q%d,%d ' "$i" $((i % 3 + 1)); done
}

run() {  # LABEL N FILLED JOBS ROUND -- CMD...
    local label=$1 n=$2 filled=$3 jobs=$4 round=$5
    shift 6
    /usr/bin/python3 "$here/lib/many_queues.py" --port "$port" --redis-pid "$redis_pid" \
        --queues "$n" --filled "$filled" --jobs "$jobs" --label "$label" --log "$work/worker.log" \
        -- "$@" >"$work/one.json" || { tail -n 20 "$work/worker.log" >&2; die "run failed: $label $n/$filled"; }
    /usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); r["round"]=int(sys.argv[2]); print(json.dumps(r))' \
        "$work/one.json" "$round" >>"$RESULTS"
    /usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("  %-28s %3d queues, %3d filled  %8.0f jobs/s  CPU/job %5.1f + redis %5.1f us" % (r["system"], r["queues"], r["filled"], r["jobs_per_s"], r["worker_cpu_us_per_job"], r["redis_cpu_us_per_job"]))' "$work/one.json" >&2
}

kiqd_yml() {  # MODE N: writes the kiqd config of N queues in MODE and prints its path
    local cfg=$work/kiqd-$1-$2.yml
    printf 'redis: {url: "redis://127.0.0.1:%s/0"}\nlogging: {level: warn}\nqueues: %s\n' \
        "$port" "$(queue_list "$2")" >"$cfg"
    [[ $1 == batched ]] && printf 'fetch: reliable\nreliable_fetch: {batch_size: 50}\n' >>"$cfg"
    echo "$cfg"
}

latency() {  # LABEL N WORKER
    local label=$1 n=$2 bin=$3 mode=${1#kiqd }
    mode=${mode% (before)}
    rcli flushall >/dev/null
    /usr/bin/python3 "$here/lib/kiqbench.py" latency --port "$port" --rate "$RATE" \
        --seconds "$SECONDS_EACH" --queues "$n" --label "$label" \
        --concurrency "$CONCURRENCY" --log "$work/worker.log" --cwd "$work" \
        --extra "{\"queues\":$n,\"mode\":\"$mode\"}" \
        -- "$bin" -C "$(kiqd_yml "$mode" "$n")" -c "$CONCURRENCY" >"$work/one.json" ||
        { tail -n 20 "$work/worker.log" >&2; die "run failed: $label, $n queues"; }
    cat "$work/one.json" >>"$RESULTS"
    /usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("  %-22s %3d queues  p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms" % (r["system"], r["queues"], r["p50_ms"], r["p99_ms"], r["max_ms"]))' "$work/one.json" >&2
}

if [[ $WHAT == latency ]]; then
    echo "many_queues: latency, $RATE job/s for ${SECONDS_EACH}s per row, c=$CONCURRENCY, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    for n in $QUEUES; do
        for mode in $MODES; do
            [[ -n $DAEMON_BEFORE ]] && latency "kiqd $mode (before)" "$n" "$DAEMON_BEFORE"
            latency "kiqd $mode" "$n" "$DAEMON"
        done
    done
    echo "many_queues: load after $(cut -d' ' -f1-3 /proc/loadavg); results in $RESULTS" >&2
    exit 0
fi

echo "many_queues: $JOBS jobs, c=$CONCURRENCY, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for ((round = 1; round <= REPEAT; round++)); do
    ((REPEAT > 1)) && echo "many_queues: round $round of $REPEAT" >&2
    for case in $CASES; do
        n=${case%/*} filled=${case#*/}
        for mode in $MODES; do
            cfg=$(kiqd_yml "$mode" "$n")
            [[ -n $KIQD_BEFORE ]] && run "kiqd $mode (before)" "$n" "$filled" "$JOBS" "$round" -- "$KIQD_BEFORE" -C "$cfg" -c "$CONCURRENCY"
            run "kiqd $mode" "$n" "$filled" "$JOBS" "$round" -- "$KIQD" -C "$cfg" -c "$CONCURRENCY"
        done
        if [[ -n $sidekiq_bin && " $SIDEKIQ_CASES " == *" $case "* ]]; then
            # shellcheck disable=SC2046
            run "Sidekiq 6.4.1 (quiet)" "$n" "$filled" "$SIDEKIQ_JOBS" "$round" -- env REDIS_URL="redis://127.0.0.1:$port/0" \
                "$sidekiq_bin" -r "$here/sidekiq_noop.rb" -c "$CONCURRENCY" $(sidekiq_queues "$n")
        fi
    done
done
echo "many_queues: load after $(cut -d' ' -f1-3 /proc/loadavg); results in $RESULTS" >&2
((REPEAT > 1)) && /usr/bin/python3 "$here/lib/many_queues.py" summary "$RESULTS" >&2
exit 0
