#!/usr/bin/env bash
# Persistent runners against Debian's Sidekiq 6.4.1, side by side in one run (targets, not tests;
# the numbers go to docs/benchmarks.md):
#   * Ruby no-op jobs and a CPU-bound Ruby job (~5 ms): kiqd + kiqd-ruby-runner with
#     processes = P (default: the CPUs) vs one Sidekiq process, both at concurrency C, and vs P
#     Sidekiq processes at C/P each;
#   * memory: PSS of kiqd and its runner processes vs the Sidekiq process(es);
#   * a Python no-op job through `exec:` (a process per job) vs the Python runner;
#   * the Rails app on PostgreSQL (bench/lib/rails_pg.sh): an ActiveJob that reads and updates
#     one row, RAILS_JOBS of them at concurrency RAILS_CONCURRENCY, kiqd with the runner pool's
#     defaults vs one Sidekiq process (6.4.1, and 7.3.10 when ../shared/gems has it);
#     RAILS_JOBS=0 leaves it out.
#
#   bench/runners.sh                     # JOBS=5000 CPU_JOBS=1000 CONCURRENCY=4 RAILS_JOBS=3000
#   JOBS=500 CPU_JOBS=200 RAILS_JOBS=0 bench/runners.sh   # smoke mode
#
# Method, per row: a private redis-server (127.0.0.1, free port, no persistence); start the
# workers on empty queues and wait until they are ready (Sidekiq: in the `processes` set; kiqd:
# every runner process idle on /metrics); LPUSH the jobs with redis-cli --pipe; seconds = from
# the push until the queue is empty (at most CONCURRENCY jobs are still running then: a few ms,
# against seconds; a per-job INCR to wait for them would cost both systems a round trip per
# job). Workers are stopped by PID.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
JOBS=${JOBS:-5000}
CPU_JOBS=${CPU_JOBS:-1000}
CONCURRENCY=${CONCURRENCY:-4}
PROCESSES=${PROCESSES:-$(nproc)}
RAILS_JOBS=${RAILS_JOBS:-3000}
RAILS_CONCURRENCY=${RAILS_CONCURRENCY:-10}
KIQD=${KIQD:-$repo/build/kiqd}
RUNNER=$repo/runners/ruby/kiqd-ruby-runner
PYRUNNER=$repo/runners/python/kiqd_runner.py

die() { echo "runners bench: $*" >&2; exit 1; }
[[ -x $KIQD ]] || die "no kiqd binary at $KIQD"
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
sidekiq_bin=$(command -v sidekiq || true)
if [[ -z $sidekiq_bin ]]; then
    gemdir=$(ruby -rsidekiq -e 'print Gem.loaded_specs["sidekiq"]&.full_gem_path.to_s' 2>/dev/null || true)
    [[ -n $gemdir && -x $gemdir/bin/sidekiq ]] && sidekiq_bin=$gemdir/bin/sidekiq
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/kiqd-runners-bench.XXXXXX")
redis_pid=""
pids=()
stop_all() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
}
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    [[ -n $redis_pid ]] && kill -TERM "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null || true
    stop_pg
    rm -rf "$work"
}
trap cleanup EXIT INT TERM
source "$repo/bench/lib/redis.sh"
source "$repo/bench/lib/rails_pg.sh"
start_redis "$(free_port)" "$work"

# push CLASS N: N payloads as Sidekiq 6.4.1 writes them.
push() {
    /usr/bin/python3 "$here/lib/push_jobs.py" "$1" "$2" | rcli --pipe >/dev/null
}

# PSS in MB of the given pids and all their descendants; `pss_mb --children PID...`: of the
# descendants only (a runner pool without kiqd itself). CPU seconds so far (utime+stime) of the
# same trees; `cpu_s --self PID...`: of the given pids alone.
pss_mb() { /usr/bin/python3 "$here/lib/proc_tree.py" pss "$@"; }
cpu_s() { /usr/bin/python3 "$here/lib/proc_tree.py" cpu "$@"; }

# cpu_us_per_job BEFORE AFTER N: µs of CPU per job between two cpu_s readings.
cpu_us_per_job() { /usr/bin/python3 -c "print(round(($2 - $1) * 1e6 / $3, 1))"; }

wait_processes() {  # wait_processes N: N entries in Sidekiq's processes set
    for _ in $(seq 600); do
        [[ $(rcli scard processes) -ge $1 ]] && return 0
        sleep 0.1
    done
    die "workers did not register"
}

wait_runners_idle() {  # wait_runners_idle METRICS_PORT N
    for _ in $(seq 600); do
        local n
        n=$(curl -s "http://127.0.0.1:$1/metrics" | grep -c '^kiqd_runner_child_state{.*state="idle"} 1' || true)
        [[ $n -ge $2 ]] && return 0
        sleep 0.1
    done
    die "runners did not boot"
}

# drain N: seconds from now until the queue is empty and N jobs are done.
drain() {
    local n=$1 start end
    start=$(date +%s.%N)
    push "$CLASS" "$n"
    while [[ $(rcli llen queue:default) != 0 ]]; do sleep 0.01; done
    end=$(date +%s.%N)
    /usr/bin/python3 -c "print(round($n / ($end - $start)))"
}

# The config lines every kiqd row shares: this Redis, concurrency, quiet logging, /metrics.
# yaml_head METRICS_PORT [batched]: batched adds kiqd's batched reliable fetch.
yaml_head() {
    printf 'redis: {url: "%s"}\nconcurrency: %s\nqueues: [default]\nlogging: {level: warn}\n' \
        "$redis_url" "$CONCURRENCY"
    printf 'metrics: {listen: "127.0.0.1:%s"}\n' "$1"
    [[ ${2:-} == batched ]] && printf 'fetch: reliable\nreliable_fetch: {batch_size: 50}\n'
    return 0
}

results=()
row() { results+=("$(printf '| %s | %s | %s | %s |' "$1" "$2" "$3" "$4")"); echo "$1: $2 jobs/s, PSS $3 MB ($4)" >&2; }

run_kiqd_ruby() {  # run_kiqd_ruby CLASS N PROCESSES [batched]
    local mport; mport=$(free_port)
    { yaml_head "$mport" "${4:-}"; cat; } >"$work/kiqd.yml" <<YAML
runners:
  ruby:
    command: ["/usr/bin/ruby", "$RUNNER", "--require", "$here/runner_app.rb"]
    processes: $3
handlers:
  "*": {runner: ruby}
YAML
    rcli flushall >/dev/null
    "$KIQD" -C "$work/kiqd.yml" >"$work/kiqd.log" 2>&1 &
    pids=($!)
    wait_runners_idle "$mport" "$3"
    local k0 c0 r0 k1 c1 r1
    k0=$(cpu_s --self "${pids[@]}"); c0=$(cpu_s --children "${pids[@]}"); r0=$(cpu_s "$redis_pid")
    rate=$(CLASS=$1 drain "$2")
    k1=$(cpu_s --self "${pids[@]}"); c1=$(cpu_s --children "${pids[@]}"); r1=$(cpu_s "$redis_pid")
    local pss pool; pss=$(pss_mb "${pids[@]}"); pool=$(pss_mb --children "${pids[@]}")
    stop_all
    local cpu
    cpu="CPU µs/job: kiqd $(cpu_us_per_job "$k0" "$k1" "$2"), runners $(cpu_us_per_job "$c0" "$c1" "$2"), redis $(cpu_us_per_job "$r0" "$r1" "$2")"
    row "kiqd + ruby runner, processes $3${4:+, $4 fetch}, $1" "$rate" "$pss" "concurrency $CONCURRENCY; runner pool alone (master + processes) $pool MB; $cpu"
}

run_sidekiq() {  # run_sidekiq CLASS N PROCESSES
    rcli flushall >/dev/null
    : >"$work/sidekiq.log"
    local per=$(( CONCURRENCY / $3 )); (( per < 1 )) && per=1
    for _ in $(seq "$3"); do
        REDIS_URL=$redis_url "$sidekiq_bin" -r "$here/runner_app.rb" -c "$per" -q default \
            >>"$work/sidekiq.log" 2>&1 &
        pids+=($!)
    done
    wait_processes "$3"
    # Proof that the Sidekiq rows are quiet: the lines its processes write during the drain,
    # and how many of them are per-job start/done lines (0 when the WARN level took effect).
    local before; before=$(wc -l <"$work/sidekiq.log")
    local w0 r0 w1 r1
    w0=$(cpu_s "${pids[@]}"); r0=$(cpu_s "$redis_pid")
    rate=$(CLASS=$1 drain "$2")
    w1=$(cpu_s "${pids[@]}"); r1=$(cpu_s "$redis_pid")
    local lines perjob
    lines=$(( $(wc -l <"$work/sidekiq.log") - before ))
    perjob=$(tail -n +"$((before + 1))" "$work/sidekiq.log" | grep -cE ' (start|done: .*sec)$' || true)
    local pss; pss=$(pss_mb "${pids[@]}")
    stop_all
    local quiet="log lines during drain: $lines (per-job: $perjob); CPU µs/job: sidekiq $(cpu_us_per_job "$w0" "$w1" "$2"), redis $(cpu_us_per_job "$r0" "$r1" "$2")"
    (( perjob > 0 )) && quiet="$quiet, NOT QUIET"
    row "sidekiq 6.4.1 x$3, $1" "$rate" "$pss" "concurrency $per each; $quiet"
}

for spec in "Bench::RubyNoop $JOBS" "Bench::RubyCpu $CPU_JOBS"; do
    set -- $spec
    [[ -n $sidekiq_bin ]] && run_sidekiq "$1" "$2" 1
    for p in 1 "$PROCESSES"; do run_kiqd_ruby "$1" "$2" "$p"; done
    run_kiqd_ruby "$1" "$2" "$PROCESSES" batched
    [[ -n $sidekiq_bin && $PROCESSES -gt 1 ]] && run_sidekiq "$1" "$2" "$PROCESSES"
done

# exec vs runner for the same Python job (reads the payload, does nothing).
cat >"$work/noop.py" <<'PY'
import json, sys
json.load(sys.stdin)
PY
cat >"$work/pyjobs.py" <<'PY'
import kiqd_runner
@kiqd_runner.job("Bench::PyNoop")
class PyNoop:
    def perform(self, *args):
        pass
PY
for mode in exec runner; do
    mport=$(free_port)
    if [[ $mode == exec ]]; then
        handler="  Bench::PyNoop: {exec: [\"/usr/bin/python3\", \"$work/noop.py\"]}"
        runners=""
    else
        handler="  \"*\": {runner: py}"
        runners="runners:
  py:
    command: [\"/usr/bin/python3\", \"$PYRUNNER\", \"--path\", \"$work\", \"--import\", \"pyjobs\"]
    processes: $PROCESSES"
    fi
    { yaml_head "$mport"; cat; } >"$work/kiqd.yml" <<YAML
$runners
handlers:
$handler
YAML
    rcli flushall >/dev/null
    "$KIQD" -C "$work/kiqd.yml" >"$work/kiqd.log" 2>&1 &
    pids=($!)
    if [[ $mode == runner ]]; then wait_runners_idle "$mport" "$PROCESSES"; else wait_processes 1; fi
    n=$CPU_JOBS
    rate=$(CLASS=Bench::PyNoop drain "$n")
    stop_all
    row "kiqd python $mode, Bench::PyNoop" "$rate" "-" "concurrency $CONCURRENCY"
done

(( RAILS_JOBS > 0 )) && run_rails_rows

echo
echo "| Setup | jobs/s | PSS MB | Notes |"
echo "| --- | --- | --- | --- |"
printf '%s\n' "${results[@]}"
echo
echo "JOBS=$JOBS CPU_JOBS=$CPU_JOBS CONCURRENCY=$CONCURRENCY PROCESSES=$PROCESSES RAILS_JOBS=$RAILS_JOBS RAILS_CONCURRENCY=$RAILS_CONCURRENCY, $(nproc) CPUs, $(date -u +%F)"
