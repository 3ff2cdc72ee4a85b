#!/usr/bin/env bash
# Core throughput benchmark: how fast does kiqd drain a queue of no-op Sidekiq
# jobs, and how does that compare with Ruby Sidekiq on the same machine?
#
#   bench/core_throughput.sh                      # JOBS=100000, CONCURRENCIES="10 25"
#   JOBS=2000 bench/core_throughput.sh            # smoke mode (a few seconds; CI)
#
# Environment:
#   JOBS=100000            jobs per run
#   CONCURRENCIES="10 25"  worker concurrencies (-c)
#   RUNS=1                 runs per (system, concurrency); the median run is reported
#   KIQD=build/kiqd        kiqd binary
#   SIDEKIQ=auto           path of the `sidekiq` executable; "none" skips Sidekiq
#   WORKER_LOG=file        where worker stdout goes: "file" (a temp file, deleted
#                          afterwards) or "null" (/dev/null)
#   RESULTS=...            where the report is written; default
#                          bench/results/core_throughput.md when JOBS >= 100000,
#                          else bench/results/core_throughput-smoke.md
#   POLL_MS=20             LLEN polling interval
#   ROWS="default warn reliable"  kiqd rows per concurrency: default (logging at info), warn
#                          (logging at warn), reliable (--fetch reliable, warn), unique
#                          (warn, every job with lock: until_and_while_executing on a distinct
#                          identity: the cost of the unique-jobs locks), throttle (warn,
#                          Kiqd::Noop under a throttle it never reaches: the counter's round
#                          trip), concurrency (warn, Kiqd::Noop under a concurrency_limit of 1000
#                          it never reaches: acquire and release scripts), limits_other
#                          (warn, both limits configured for another class: what unlimited
#                          classes pay),
#                          nometa (warn, `job_metadata: false`: without the metadata
#                          middleware, so that warn - nometa is its cost), metrics (warn,
#                          Kiqd::Noop declared urgency: high and the /metrics endpoint on)
#
# Method, per system and concurrency: FLUSHALL; push JOBS Kiqd::Noop payloads
# (Sidekiq 6.4.1 shape, unique jids, LPUSH in batches of 1000 via redis-cli --pipe);
# start the worker; poll LLEN queue:default every POLL_MS on one connection until
# it is 0; drain seconds = worker start -> queue empty (includes process start-up);
# read VmHWM (peak RSS) and CPU time from /proc/<pid> before sending SIGTERM; wait
# for exit (code must be 0); then stat:processed must equal JOBS and
# stat:failed/retry/dead must be empty. The Redis server is private to this
# script (127.0.0.1, free port, no persistence) and is stopped by PID on exit.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
helper=("/usr/bin/python3" "$here/lib/kiqbench.py")

JOBS=${JOBS:-100000}
CONCURRENCIES=${CONCURRENCIES:-"10 25"}
RUNS=${RUNS:-1}
KIQD=${KIQD:-$repo/build/kiqd}
SIDEKIQ=${SIDEKIQ:-auto}
WORKER_LOG=${WORKER_LOG:-file}
if ((JOBS >= 100000)); then default_results=$here/results/core_throughput.md
else default_results=$here/results/core_throughput-smoke.md; fi  # smoke runs keep the real report
RESULTS=${RESULTS:-$default_results}
POLL_MS=${POLL_MS:-20}
ROWS=${ROWS:-"default warn reliable"}
push_args=()
QUEUE=default

die() { echo "core_throughput: $*" >&2; exit 1; }

[[ -x $KIQD ]] || die "no kiqd binary at $KIQD (build: cmake -S $repo -B $repo/build && make -C $repo/build -j2 kiqd)"
command -v redis-server >/dev/null || die "redis-server not found"
command -v redis-cli >/dev/null || die "redis-cli not found"
command -v /usr/bin/python3 >/dev/null || die "/usr/bin/python3 not found"
[[ $WORKER_LOG == file || $WORKER_LOG == null ]] || die "WORKER_LOG must be file or null"

sidekiq_bin=""
sidekiq_version=""
if [[ $SIDEKIQ != none ]]; then
    if ruby -e 'require "sidekiq"' >/dev/null 2>&1; then
        if [[ $SIDEKIQ == auto ]]; then
            sidekiq_bin=$(command -v sidekiq || true)
            if [[ -z $sidekiq_bin ]]; then
                gemdir=$(ruby -e 'print Gem.loaded_specs["sidekiq"]&.full_gem_path.to_s' -rsidekiq 2>/dev/null || true)
                [[ -n $gemdir && -x $gemdir/bin/sidekiq ]] && sidekiq_bin=$gemdir/bin/sidekiq
            fi
        else
            sidekiq_bin=$SIDEKIQ
        fi
        sidekiq_version=$(ruby -rsidekiq -e 'print Sidekiq::VERSION')
    fi
    [[ -n $sidekiq_bin ]] || echo "core_throughput: Ruby Sidekiq not available; kiqd rows only" >&2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/kiqd-bench.XXXXXX")
redis_pid=""
drain_pid=""
source "$here/lib/cleanup.sh"

# ------------------------------------------------------------------ redis
source "$here/lib/redis.sh"
start_redis "$("${helper[@]}" freeport)" "$work"

printf 'redis: {url: "%s"}\n' "$redis_url" >"$work/kiqd.yml"
printf 'redis: {url: "%s"}\nlogging: {level: warn}\n' "$redis_url" >"$work/kiqd-warn.yml"
limits_config() {  # FILE CLASS HANDLER_OPTIONS
    cp "$work/kiqd-warn.yml" "$1"
    printf 'handlers:\n  %s: %s\n' "$2" "$3" >>"$1"
}
limits_config "$work/kiqd-throttle.yml" Kiqd::Noop '{throttle: {limit: 1000000000, period: 3600}}'
limits_config "$work/kiqd-concurrency.yml" Kiqd::Noop '{concurrency_limit: 1000}'
limits_config "$work/kiqd-limits-other.yml" Other \
    '{throttle: {limit: 10, period: 60}, concurrency_limit: 1}'
printf 'redis: {url: "%s"}\nlogging: {level: warn}\njob_metadata: false\n' "$redis_url" \
    >"$work/kiqd-nometa.yml"
printf 'redis: {url: "%s"}\nlogging: {level: warn}\nmetrics: {listen: "127.0.0.1:0"}\nhandlers: {"Kiqd::Noop": {urgency: high, feature_category: bench}}\n' \
    "$redis_url" >"$work/kiqd-metrics.yml"

results_jsonl="$work/results.jsonl"
: >"$results_jsonl"

prepare_queue() {
    rcli flushall >/dev/null
    "${helper[@]}" push --jobs "$JOBS" --queue "$QUEUE" "${push_args[@]}" |
        rcli --pipe >"$work/pipe.out" 2>&1 || die "redis-cli --pipe failed: $(cat "$work/pipe.out")"
    grep -q 'errors: 0' "$work/pipe.out" || die "push errors: $(cat "$work/pipe.out")"
    local n
    n=$(rcli llen "queue:$QUEUE")
    [[ $n == "$JOBS" ]] || die "expected $JOBS queued jobs, found $n"
}

# run_one LABEL CONCURRENCY ENV... -- CMD...
run_one() {
    local label=$1 c=$2 logf
    shift 2
    local envs=()
    while [[ $1 != -- ]]; do envs+=("$1"); shift; done
    shift
    if [[ $WORKER_LOG == file ]]; then logf="$work/worker.log"; : >"$logf"; else logf=/dev/null; fi
    prepare_queue
    env "${envs[@]}" "${helper[@]}" drain --port "$port" --jobs "$JOBS" --queue "$QUEUE" \
        --label "$label" --concurrency "$c" --log "$logf" --cwd "$work" --poll-ms "$POLL_MS" \
        -- "$@" >"$work/one.json" &
    drain_pid=$!
    if ! wait "$drain_pid"; then
        drain_pid=""
        [[ $logf == /dev/null ]] || { echo "--- last worker log lines:" >&2; tail -n 20 "$logf" >&2; }
        die "run failed: $label c=$c"
    fi
    drain_pid=""
    cat "$work/one.json" >>"$results_jsonl"
    local lines=""
    [[ $logf == /dev/null ]] || lines=", $(wc -l <"$logf") log lines / $(du -h "$logf" | cut -f1)"
    /usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("  %-26s c=%-3d %8.3f s %9.0f jobs/s  peak RSS %6.1f MB  cpu %.2f s (redis %.2f s), first job %.2f s, stop %.2f s%s" % (r["system"], r["concurrency"], r["seconds"], r["jobs_per_s"], r["peak_rss_mb"], r["worker_cpu_s"], r["redis_cpu_s"], r["first_take_s"] or 0, r["stop_s"], sys.argv[2]))' \
        "$work/one.json" "$lines" >&2
}

sidekiq_label="sidekiq $sidekiq_version (log warn)"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
echo "core_throughput: JOBS=$JOBS CONCURRENCIES=\"$CONCURRENCIES\" RUNS=$RUNS redis=127.0.0.1:$port worker log -> $WORKER_LOG" >&2
for c in $CONCURRENCIES; do
    for ((run = 1; run <= RUNS; run++)); do
        for row in $ROWS; do
            case $row in
            default) run_one "kiqd" "$c" -- "$KIQD" -C "$work/kiqd.yml" -c "$c" -q "$QUEUE" ;;
            warn) run_one "kiqd (log warn)" "$c" -- "$KIQD" -C "$work/kiqd-warn.yml" -c "$c" \
                -q "$QUEUE" ;;
            reliable) run_one "kiqd reliable (log warn)" "$c" -- "$KIQD" -C "$work/kiqd-warn.yml" \
                -c "$c" -q "$QUEUE" --fetch reliable ;;
            unique)
                push_args=(--unique)
                run_one "kiqd unique lock (log warn)" "$c" -- "$KIQD" -C "$work/kiqd-warn.yml" \
                    -c "$c" -q "$QUEUE"
                push_args=()
                ;;
            throttle) run_one "kiqd throttle (log warn)" "$c" -- "$KIQD" \
                -C "$work/kiqd-throttle.yml" -c "$c" -q "$QUEUE" ;;
            concurrency) run_one "kiqd concurrency limit (log warn)" "$c" -- "$KIQD" \
                -C "$work/kiqd-concurrency.yml" -c "$c" -q "$QUEUE" ;;
            limits_other) run_one "kiqd limits on another class (log warn)" "$c" -- "$KIQD" \
                -C "$work/kiqd-limits-other.yml" -c "$c" -q "$QUEUE" ;;
            nometa) run_one "kiqd no metadata mw (log warn)" "$c" -- "$KIQD" \
                -C "$work/kiqd-nometa.yml" -c "$c" -q "$QUEUE" ;;
            metrics) run_one "kiqd metadata+metrics (log warn)" "$c" -- "$KIQD" \
                -C "$work/kiqd-metrics.yml" -c "$c" -q "$QUEUE" ;;
            *) die "unknown row '$row' in ROWS" ;;
            esac
        done
        if [[ -n $sidekiq_bin ]]; then
            run_one "$sidekiq_label" "$c" REDIS_URL="$redis_url" -- \
                "$sidekiq_bin" -r "$here/sidekiq_noop.rb" -c "$c" -q "$QUEUE"
        fi
    done
done

# ------------------------------------------------------------------ report
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
cpu_model=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)
redis_version=$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')
kiqd_version=$("$KIQD" --version 2>/dev/null | head -n1 || true)
kiqd_built=$(date -u -r "$KIQD" +%Y-%m-%dT%H:%MZ)
kiqd_sha=$(sha1sum "$KIQD" | cut -c1-12)
git_rev=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null) ]] && git_rev="$git_rev (dirty tree)"
if [[ $WORKER_LOG == file ]]; then log_note="a file in \$TMPDIR"; else log_note="/dev/null"; fi

sidekiq_note="- Sidekiq: not installed or SIDEKIQ=none, not run"
[[ -n $sidekiq_bin ]] && sidekiq_note="- Sidekiq runs \`bench/sidekiq_noop.rb\` via $sidekiq_bin: logger at warn (set in configure_server; bench/run counts its log lines to show it), redis-rb deprecation warnings silenced (redis-rb 4.8 warns on every BRPOP that Sidekiq 6.4.1 issues)"
table=$("${helper[@]}" table --results "$results_jsonl" --baseline "$sidekiq_label")
report=$(
    cat <<EOF
## kiqd core throughput (Kiqd::Noop, drain of a pre-filled queue)

$table

- ratio: jobs/s relative to ${sidekiq_label:+"$sidekiq_label"} at the same concurrency (n/a: Sidekiq not run)
- seconds: worker process start -> \`LLEN queue:$QUEUE\` = 0 (polled every $POLL_MS ms), so it includes start-up; "first job s" is when the queue first shrank
- peak RSS: VmHWM of the worker process, read just before SIGTERM; CPU: utime+stime of the worker / Redis (INFO cpu) over the drain; stop s: SIGTERM -> exit
- every run: worker exited 0 on SIGTERM and stat:processed = $JOBS, nothing failed/retried/dead
- "kiqd" logs one line per job start and finish (default level info); "(log warn)" runs use \`logging: {level: warn}\`; "reliable" runs use \`--fetch reliable\` (one fetch script and one LREM per job); "unique lock" runs push every job with \`lock: until_and_while_executing\` on its own identity (an acquire and a release script per job); "throttle" / "concurrency limit" runs configure Kiqd::Noop with a throttle (limit 10^9 per hour) / a concurrency_limit of 1000 that are never reached, "limits on another class" both for another class; "no metadata mw" runs use \`job_metadata: false\` (every other row runs the metadata middleware); "metadata+metrics" runs declare \`Kiqd::Noop\` with \`urgency: high\` and serve \`/metrics\`; worker stdout went to $log_note
${sidekiq_note}
- machine: $(nproc) CPUs, ${cpu_model:-unknown CPU}, $(uname -sr); redis-server $redis_version (same host, loopback); load average $load_start at start, $load_end at end
- kiqd: ${kiqd_version:-?}, binary sha1 $kiqd_sha built $kiqd_built, git $git_rev; $(ruby -v 2>/dev/null | cut -d' ' -f1-2 || echo "no ruby")
- command: \`JOBS=$JOBS CONCURRENCIES="$CONCURRENCIES" RUNS=$RUNS ROWS="$ROWS" bench/core_throughput.sh\` ($(date -u +%Y-%m-%dT%H:%MZ))
EOF
)
echo
echo "$report"
mkdir -p "$(dirname "$RESULTS")"
echo "$report" >"$RESULTS"
echo >&2
echo "core_throughput: written to $RESULTS" >&2
