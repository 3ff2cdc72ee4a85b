#!/usr/bin/env bash
# Exec-handler throughput: how many jobs per second kiqd runs when every job starts an external
# command (`handlers: {Bench::True: {exec: [/bin/true]}}`), i.e. the cost of posix_spawn, the
# stdin/stdout/stderr pipes, the payload write and waitpid per job.
#
#   bench/exec_throughput.sh                 # JOBS=10000 CONCURRENCY=10 RUNS=3
#   JOBS=1000 RUNS=1 bench/exec_throughput.sh   # smoke mode
#
# Environment: JOBS, CONCURRENCY, RUNS (median reported), KIQD (default build/kiqd),
# COMMAND (default /bin/true).
# Method, per run: FLUSHALL; LPUSH JOBS Sidekiq-6.4.1-shaped payloads (unique jids) via
# redis-cli --pipe; start kiqd (logging at warn); poll LLEN queue:default every 20 ms until 0;
# SIGTERM (a clean stop waits for the jobs still running); seconds = kiqd start → exit, so
# process start-up is included. stat:processed must equal JOBS and stat:failed must be 0.
# CPU ms/job: kiqd's own CPU time plus that of every child it reaped (the commands), from kiqd
# start to exit, divided by JOBS: the cost per job on a machine that other
# work shares, where jobs/s depends on the load.
# The redis-server is private (127.0.0.1, free port, no persistence) and stopped by PID.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
JOBS=${JOBS:-10000}
CONCURRENCY=${CONCURRENCY:-10}
RUNS=${RUNS:-3}
KIQD=${KIQD:-$repo/build/kiqd}
COMMAND=${COMMAND:-/bin/true}

die() { echo "exec_throughput: $*" >&2; exit 1; }
[[ -x $KIQD ]] || die "no kiqd binary at $KIQD"
command -v redis-server >/dev/null || die "redis-server not found"
command -v /usr/bin/python3 >/dev/null || die "/usr/bin/python3 not found"

work=$(mktemp -d "${TMPDIR:-/tmp}/kiqd-exec-bench.XXXXXX")
redis_pid=""
kiqd_pid=""
cleanup() {
    [[ -n $kiqd_pid ]] && kill -TERM "$kiqd_pid" 2>/dev/null && wait "$kiqd_pid" 2>/dev/null || true
    [[ -n $redis_pid ]] && kill -TERM "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

source "$repo/bench/lib/redis.sh"
start_redis "$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')" "$work"

cat >"$work/kiqd.yml" <<YAML
redis: {url: "redis://127.0.0.1:$port/0"}
concurrency: $CONCURRENCY
queues: [default]
logging: {level: warn}
handlers:
  Bench::True:
    exec: ["$COMMAND"]
YAML

/usr/bin/python3 "$repo/bench/lib/push_jobs.py" Bench::True "$JOBS" >"$work/push.resp"

rates=()
cpus=()
for run in $(seq "$RUNS"); do
    rcli flushall >/dev/null
    rcli --pipe <"$work/push.resp" >/dev/null
    [[ $(rcli llen queue:default) == "$JOBS" ]] || die "push failed"
    start=$(date +%s.%N)
    # kiqd under cpu_time.py, which passes the SIGTERM on and measures kiqd's CPU time with
    # that of every child it reaped (the commands).
    /usr/bin/python3 "$repo/bench/lib/cpu_time.py" "$work/cpu" "$KIQD" -C "$work/kiqd.yml" \
        >"$work/kiqd.log" 2>&1 &
    kiqd_pid=$!
    while [[ $(rcli llen queue:default) != 0 ]]; do sleep 0.02; done
    kill -TERM "$kiqd_pid"
    wait "$kiqd_pid" || die "kiqd exited with $? (log: $(tail -5 "$work/kiqd.log"))"
    end=$(date +%s.%N)
    kiqd_pid=""
    processed=$(rcli get stat:processed)
    failed=$(rcli get stat:failed)
    [[ $processed == "$JOBS" ]] || die "stat:processed=$processed, expected $JOBS"
    [[ -z $failed || $failed == 0 ]] || die "stat:failed=$failed"
    rate=$(/usr/bin/python3 -c "print(round($JOBS / ($end - $start)))")
    cpu_ms=$(/usr/bin/python3 -c "print(round($(cat "$work/cpu") * 1000 / $JOBS, 3))")
    echo "run $run: $JOBS jobs in $(/usr/bin/python3 -c "print(round($end - $start, 2))") s = $rate jobs/s, CPU $cpu_ms ms/job (kiqd and its children)"
    rates+=("$rate")
    cpus+=("$cpu_ms")
done
median=$(printf '%s\n' "${rates[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
cpu_median=$(printf '%s\n' "${cpus[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
echo "exec_throughput: $COMMAND, concurrency $CONCURRENCY, $JOBS jobs, median of $RUNS: $median jobs/s, CPU $cpu_median ms/job"
