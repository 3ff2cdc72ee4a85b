#!/usr/bin/env bash
# Unique jobs with the real sidekiq-unique-jobs gem on both sides: the same jobs, pushed through
# the gem's client middleware (each takes its client lock, until_and_while_executing, distinct
# arguments), drained by Ruby Sidekiq with the gem's server middleware and by kiqd (which does
# what that middleware does, on the gem's keys). Quiet logging on both sides. Plain rows (no
# lock, jobs pushed by bench/lib/kiqbench.py push) give what the lock costs each system.
#
#   bench/unique_gem.sh                 # JOBS=20000, CONCURRENCY=10, RUNS=1
#   JOBS=300 bench/unique_gem.sh        # smoke (CI)
#
# Gem lines, each from its test world (tests/gemfiles/, run through scripts/world; installed by
# scripts/install-gems): sidekiq-unique-jobs 7.1.33 on Sidekiq 6.4.1, 8.1.0 on Sidekiq 7.3.10 and
# on Sidekiq 8.1.7 (Ruby 3.3). Each row: flush, push, then bench/lib/kiqbench.py drain (the worker
# is started on the full queue and timed until it is empty; CPU per job from /proc of the worker
# and of redis-server; log lines counted; stopped by PID with SIGTERM; stat:processed checked).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
helper=("/usr/bin/python3" "$here/lib/kiqbench.py")
JOBS=${JOBS:-20000}
CONCURRENCY=${CONCURRENCY:-10}
RUNS=${RUNS:-1}
BATCH=${BATCH:-50}
KIQD=${KIQD:-$repo/build/kiqd}
world=("$repo/scripts/world")

die() { echo "unique_gem: $*" >&2; exit 1; }
[[ -x $KIQD ]] || die "no kiqd binary at $KIQD"
# version|gem|world
lines=("6.4.1|sidekiq-unique-jobs 7.1.33|sidekiq64"
    "7.3.10|sidekiq-unique-jobs 8.1.0|sidekiq73"
    "8.1.7|sidekiq-unique-jobs 8.1.0|sidekiq81")
for line in "${lines[@]}"; do
    IFS='|' read -r version gem name <<<"$line"
    "${world[@]}" "$name" ruby -e 'require "sidekiq"; require "sidekiq_unique_jobs"
      exit(Sidekiq::VERSION == ARGV[0] && SidekiqUniqueJobs::VERSION == ARGV[1].split.last)' \
        "$version" "$gem" || die "the $name world has not Sidekiq $version with $gem (bash scripts/install-gems $name)"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/kiqd-bench-unique-gem.XXXXXX")
redis_pid=""
drain_pid=""
source "$here/lib/cleanup.sh"
source "$here/lib/redis.sh"
start_redis "$("${helper[@]}" freeport)" "$work"

printf 'redis: {url: "%s"}\nqueues: [default]\nlogging: {level: warn}\n' "$redis_url" >"$work/basic.yml"
cp "$work/basic.yml" "$work/batched.yml"
printf 'fetch: reliable\nreliable_fetch: {batch_size: %s}\n' "$BATCH" >>"$work/batched.yml"

results=$work/results.jsonl
: >"$results"
push_gem() {  # WORLD
    rcli flushall >/dev/null
    "${world[@]}" "$1" env REDIS_URL="$redis_url" ruby -W0 "$here/sidekiq_unique.rb" push "$JOBS" \
        >"$work/push.out" || die "push through the gem's client failed"
    [[ $(rcli llen queue:default) == "$JOBS" ]] || die "push: expected $JOBS jobs"
}
push_plain() {
    rcli flushall >/dev/null
    "${helper[@]}" push --jobs "$JOBS" --queue default --distinct-args | rcli --pipe >/dev/null
}
drain() {  # LABEL -- CMD...
    local label=$1
    shift 2
    "${helper[@]}" drain --port "$port" --jobs "$JOBS" --queue default --label "$label" \
        --concurrency "$CONCURRENCY" --log "$work/worker.log" --cwd "$work" --poll-ms 10 \
        --redis-pid "$redis_pid" -- "$@" >"$work/one.json" &
    drain_pid=$!
    wait "$drain_pid" || { tail -n 20 "$work/worker.log" >&2; die "drain failed: $label"; }
    drain_pid=""
    cat "$work/one.json" >>"$results"
    /usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("  %-62s %8.0f jobs/s  CPU/job %6.1f + redis %5.1f us  log %d" % (r["system"], r["jobs_per_s"], r["worker_cpu_us_per_job"], r["redis_cpu_us_per_job"], r["log_lines"]))' "$work/one.json" >&2
    # Every job's locks must be gone once it ran (the client lock and the run lock).
    local left
    left=$(rcli --scan --pattern 'uniquejobs:*:LOCKED' | wc -l)
    [[ $left == 0 ]] || die "$label: $left locks left after the drain"
}

echo "unique_gem: JOBS=$JOBS CONCURRENCY=$CONCURRENCY RUNS=$RUNS load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for ((run = 1; run <= RUNS; run++)); do
    for line in "${lines[@]}"; do
        IFS='|' read -r version gem name <<<"$line"
        # scripts/world execs the world's `sidekiq`: the drained pid is Sidekiq's own.
        push_plain && drain "Sidekiq $version (quiet), plain" -- "${world[@]}" "$name" \
            env REDIS_URL="$redis_url" sidekiq -r "$here/sidekiq_noop.rb" -c "$CONCURRENCY" -q default
        push_gem "$name" && drain "Sidekiq $version (quiet) + $gem" -- "${world[@]}" "$name" \
            env REDIS_URL="$redis_url" sidekiq -r "$here/sidekiq_unique.rb" -c "$CONCURRENCY" -q default
        push_gem "$name" && drain "kiqd basic, jobs from $gem's client ($version)" -- \
            "$KIQD" -C "$work/basic.yml" -c "$CONCURRENCY"
        push_gem "$name" && drain "kiqd reliable batch $BATCH, jobs from $gem's client ($version)" -- \
            "$KIQD" -C "$work/batched.yml" -c "$CONCURRENCY"
    done
    push_plain && drain "kiqd basic, plain" -- "$KIQD" -C "$work/basic.yml" -c "$CONCURRENCY"
    push_plain && drain "kiqd reliable batch $BATCH, plain" -- "$KIQD" -C "$work/batched.yml" -c "$CONCURRENCY"
done
/usr/bin/python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault(r["system"], []).append(r)
print("| system | jobs | jobs/s (median) | worker CPU µs/job | Redis CPU µs/job | log lines (per-job) | peak RSS MB | runs |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for name, runs in by.items():
    runs.sort(key=lambda r: r["jobs_per_s"])
    m = runs[(len(runs) - 1) // 2]
    print("| %s | %d | %.0f | %.1f | %.1f | %d (%d) | %.1f | %d |" % (
        name, m["jobs"], m["jobs_per_s"], m["worker_cpu_us_per_job"], m["redis_cpu_us_per_job"],
        m["log_lines"], m["log_job_lines"], m["peak_rss_mb"], len(runs)))
PY
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
