#!/usr/bin/env bash
# Backlog: how fast the scheduler empties a backlog of due jobs (a perform_at burst in
# `schedule`, a retry storm in `retry`), kiqd with basic and with batched reliable fetch beside
# quiet Sidekiq 7.3 (the sidekiq73 test world) on the same Redis. Called by bench/run (section
# "backlog"); runs alone too:
#
#   bench/backlog.sh
#   KIQD_BEFORE=/tmp/kiqd-old bench/backlog.sh   # also rows for another kiqd build
#
# Environment:
#   SCHEDULE_JOBS=100000      due jobs in `schedule`
#   RETRY_JOBS=1000000        due jobs in `retry`
#   SIDEKIQ_SCHEDULE_JOBS=$SCHEDULE_JOBS  SIDEKIQ_RETRY_JOBS=100000  Sidekiq's backlogs (it
#                             moves about 2,500 jobs a second, steadily: 1,000,000 would take
#                             minutes; its rows compare by moves/s)
#   SETS="schedule retry"     the backlogs measured
#   CONCURRENCY=10            worker concurrency (-c); the jobs run while the backlog moves
#   MODES="basic batched mover"  kiqd rows: basic fetch, reliable fetch with batch_size BATCH
#                             (50), and "mover": processors on another queue, so the scheduler
#                             moves alone (Sidekiq gets such a row too: -q elsewhere); each job
#                             must then be in its queue exactly once
#   KIQD=build/kiqd           kiqd binary; KIQD_BEFORE: a second binary, rows labelled "before"
#   SIDEKIQ7=auto             none: no Sidekiq 7.3 rows
#   RESULTS=bench/results/backlog.jsonl  one JSON line per row (appended)
#
# Method: a private redis-server (127.0.0.1, free port, no persistence, stopped by PID). Per row:
# FLUSHALL, ZADD the backlog (bench/lib/backlog.py push: due scores, one per job), start the
# worker with its scheduler's poll_interval_average at 1 s (kiqd's config; Sidekiq in
# bench/sidekiq_backlog.rb), time from the first move to an empty set (ZCARD every 10 ms), and
# on until every job was taken (its queue and working lists empty); the longest script call from
# SLOWLOG (calls of 200 us or more). Both log at warn.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
SCHEDULE_JOBS=${SCHEDULE_JOBS:-100000}
RETRY_JOBS=${RETRY_JOBS:-1000000}
SIDEKIQ_SCHEDULE_JOBS=${SIDEKIQ_SCHEDULE_JOBS:-$SCHEDULE_JOBS}
SIDEKIQ_RETRY_JOBS=${SIDEKIQ_RETRY_JOBS:-100000}
SETS=${SETS:-"schedule retry"}
CONCURRENCY=${CONCURRENCY:-10}
MODES=${MODES:-"basic batched mover"}
BATCH=${BATCH:-50}
KIQD=${KIQD:-$repo/build/kiqd}
KIQD_BEFORE=${KIQD_BEFORE:-}
SIDEKIQ7=${SIDEKIQ7:-auto}
RESULTS=${RESULTS:-$here/results/backlog.jsonl}
helper=("/usr/bin/python3" "$here/lib/backlog.py")

die() { echo "backlog: $*" >&2; exit 1; }
[[ -x $KIQD ]] || die "no kiqd at $KIQD"
sk7_cmd="" sk7_version=""
if [[ $SIDEKIQ7 != none ]]; then
    sk7_version=$("$repo/scripts/world" sidekiq73 ruby -e 'require "sidekiq"; print Sidekiq::VERSION') ||
        die "the sidekiq73 test world is not installed (bash scripts/install-gems sidekiq73), or SIDEKIQ7=none"
    sk7_cmd="$repo/scripts/world sidekiq73 sidekiq"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/kiqd-backlog.XXXXXX")
pids=()
child=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -n $child ]] && kill -0 "$child" 2>/dev/null; then
        kill -TERM "$child" 2>/dev/null || true  # the helper stops its worker by PID
        wait "$child" 2>/dev/null || true
    fi
    for p in "${pids[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

source "$here/lib/redis.sh"
start_redis "$(/usr/bin/python3 "$here/lib/kiqbench.py" freeport)" "$work"
pids+=("$redis_pid")
mkdir -p "$(dirname "$RESULTS")"
run_results=$work/results.jsonl
: >"$run_results"

kiqd_yml() {  # MODE
    local f=$work/kiqd-$1.yml queue=default
    [[ $1 == mover ]] && queue=elsewhere
    printf 'redis: {url: "%s"}\nqueues: [%s]\nlogging: {level: warn}\npoll_interval_average: 1\n' \
        "$redis_url" "$queue" >"$f"
    [[ $1 == batched ]] && printf 'fetch: reliable\nreliable_fetch: {batch_size: %s}\n' "$BATCH" >>"$f"
    echo "$f"
}

# row SET JOBS LABEL EXTRA_JSON [--mover-only] -- CMD...
row() {
    local set=$1 n=$2 label=$3 extra=$4 flags=()
    shift 4
    [[ $1 == --mover-only ]] && { flags=(--mover-only); shift; }
    shift  # --
    rcli flushall >/dev/null
    "${helper[@]}" push --set "$set" --jobs "$n" | rcli --pipe >"$work/pipe.out" 2>&1 ||
        die "push failed: $(cat "$work/pipe.out")"
    "${helper[@]}" run --port "$port" --set "$set" --jobs "$n" --label "$label" \
        --log "$work/worker.log" --cwd "$work" --redis-pid "$redis_pid" --extra "$extra" \
        "${flags[@]}" -- "$@" >"$work/one.json" &
    child=$!
    wait "$child" || { tail -n 20 "$work/worker.log" >&2; die "row failed: $set $label"; }
    child=""
    cat "$work/one.json" >>"$run_results"
    /usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("  backlog  %-9s %-32s %8d jobs  emptied in %7.2f s  %8.0f moves/s  all taken %7.2f s  longest script %s us, %d over 5 ms" % (r["set"], r["system"], r["jobs"], r["empty_s"], r["moves_per_s"], r["all_taken_s"], r["max_script_us"] if r["max_script_us"] is not None else "<%d" % r["slowlog_threshold_us"], r["script_calls_over_5ms"]))' "$work/one.json" >&2
}

for set in $SETS; do
    if [[ $set == schedule ]]; then n=$SCHEDULE_JOBS sk_n=$SIDEKIQ_SCHEDULE_JOBS; else n=$RETRY_JOBS sk_n=$SIDEKIQ_RETRY_JOBS; fi
    for mode in $MODES; do
        label="kiqd $mode" only=()
        [[ $mode == batched ]] && label="kiqd reliable batch $BATCH"
        [[ $mode == mover ]] && label="kiqd scheduler alone" only=(--mover-only)
        cfg=$(kiqd_yml "$mode")
        row "$set" "$n" "$label" "{\"kind\":\"kiqd\",\"fetch\":\"$mode\"}" "${only[@]}" -- \
            "$KIQD" -C "$cfg" -c "$CONCURRENCY"
        if [[ -n $KIQD_BEFORE ]]; then
            row "$set" "$n" "$label, before" "{\"kind\":\"kiqd-before\",\"fetch\":\"$mode\"}" \
                "${only[@]}" -- "$KIQD_BEFORE" -C "$cfg" -c "$CONCURRENCY"
        fi
    done
    if [[ -n $sk7_cmd ]]; then
        # shellcheck disable=SC2086
        row "$set" "$sk_n" "Sidekiq $sk7_version (quiet)" "{\"kind\":\"sidekiq\",\"sidekiq\":\"$sk7_version\"}" -- \
            env SIDEKIQ_BENCH_LOG=quiet REDIS_URL="$redis_url" $sk7_cmd -r "$here/sidekiq_backlog.rb" \
            -c "$CONCURRENCY" -q default
        if [[ " $MODES " == *" mover "* ]]; then
            # shellcheck disable=SC2086
            row "$set" "$sk_n" "Sidekiq $sk7_version (quiet), scheduler alone" \
                "{\"kind\":\"sidekiq-mover\",\"sidekiq\":\"$sk7_version\"}" --mover-only -- \
                env SIDEKIQ_BENCH_LOG=quiet REDIS_URL="$redis_url" $sk7_cmd -r "$here/sidekiq_backlog.rb" \
                -c "$CONCURRENCY" -q elsewhere
        fi
    fi
done
cat "$run_results" >>"$RESULTS"
"${helper[@]}" table --results "$run_results"
