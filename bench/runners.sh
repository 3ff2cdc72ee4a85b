#!/usr/bin/env bash
# Persistent runners against Debian's Sidekiq 6.4.1, side by side in one run (targets, not tests;
# the numbers go to docs/benchmarks.md). For each Ruby workload (bench/runner_app.rb):
#   no-op; IO-bound (20 ms wait + one Redis call); mixed (90 % IO-bound, 10 % CPU-bound);
#   CPU-bound (~5 ms of Ruby)
# the rows are kiqd + kiqd-ruby-runner with the *default* runner settings (processes = the
# CPUs, threads = ceil(concurrency / processes)), one Sidekiq process at concurrency C, and a
# Sidekiq swarm shape (P processes at C/P each); no-op and CPU-bound add kiqd with one process
# and kiqd with batched reliable fetch. Each row reports jobs/s and the PSS of the whole tree,
# and the kiqd and Sidekiq rows CPU and thread wake-ups (voluntary context switches) per job.
# Then a Python no-op job through `exec:` (a process per job) vs the Python runner. The `rails`
# workload (bench/lib/rails_pg.sh) is the Rails app on PostgreSQL: an ActiveJob that reads and
# updates one row, RAILS_JOBS (default IO_JOBS) of them, kiqd with the default runner settings
# vs one Sidekiq process at the same concurrency and Active Record pool size: Sidekiq 6.4.1 on
# Rails 6.1 (Debian's), 7.3 on Rails 7.2 and 8.1 on Rails 8.1 (the test worlds, scripts/world).
#
#   bench/runners.sh                     # JOBS=5000 IO_JOBS=2500 CPU_JOBS=1000 CONCURRENCY=25
#   JOBS=300 IO_JOBS=200 CPU_JOBS=50 bench/runners.sh   # smoke mode
#   WORKLOADS="io mixed" bench/runners.sh               # some workloads only
#   WORKLOADS=none PY_JOBS=30000 bench/runners.sh       # the Python rows only (PYRUNNER= picks
#                                                       # the runner file)
#   WORKLOADS=rails RAILS_JOBS=5000 bench/runners.sh    # the Rails app only
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
IO_JOBS=${IO_JOBS:-2500}
CPU_JOBS=${CPU_JOBS:-1000}
RAILS_JOBS=${RAILS_JOBS:-$IO_JOBS}
CONCURRENCY=${CONCURRENCY:-25}
WORKLOADS=${WORKLOADS:-noop io mixed cpu rails}
PROCESSES=${PROCESSES:-$(nproc)}
KIQD=${KIQD:-$repo/build/kiqd}
RUNNER=$repo/runners/ruby/kiqd-ruby-runner
PYRUNNER=${PYRUNNER:-$repo/runners/python/kiqd_runner.py}
PY_JOBS=${PY_JOBS:-$CPU_JOBS}  # for the Python runner row (exec: gets CPU_JOBS)

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
# Times the tree's threads have slept and been woken so far (voluntary context switches).
waits() { /usr/bin/python3 "$here/lib/proc_tree.py" waits "$@"; }

# cpu_us_per_job BEFORE AFTER N: µs of CPU per job between two cpu_s readings.
cpu_us_per_job() { /usr/bin/python3 -c "print(round(($2 - $1) * 1e6 / $3, 1))"; }
# waits_per_job BEFORE AFTER N: thread wake-ups per job between two waits readings.
waits_per_job() { /usr/bin/python3 -c "print(round(($2 - $1) / $3, 2))"; }

wait_processes() {  # wait_processes N: N entries in Sidekiq's processes set
    for _ in $(seq 600); do
        [[ $(rcli scard processes) -ge $1 ]] && return 0
        sleep 0.1
    done
    die "workers did not register"
}

# metrics_text PORT: kiqd's /metrics page, or nothing while it does not answer (Debian's Python,
# which the benchmarks use anyway: a base Debian 12 has no curl).
metrics_text() {
    /usr/bin/python3 -c 'import sys, urllib.request
try: print(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())
except Exception: pass' "http://127.0.0.1:$1/metrics"
}

wait_runners_idle() {  # wait_runners_idle METRICS_PORT N
    for _ in $(seq 600); do
        local n
        n=$(metrics_text "$1" | grep -c '^kiqd_runner_child_state{.*state="idle"} 1' || true)
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

run_kiqd_ruby() {  # run_kiqd_ruby CLASS N PROCESSES|default [batched]
    local mport; mport=$(free_port)
    local processes_line="    processes: $3" nproc_=$3
    if [[ $3 == default ]]; then processes_line=""; nproc_=$(nproc); fi
    { yaml_head "$mport" "${4:-}"; cat; } >"$work/kiqd.yml" <<YAML
runners:
  ruby:
    command: ["/usr/bin/ruby", "$RUNNER", "--require", "$here/runner_app.rb"]
$processes_line
handlers:
  "*": {runner: ruby}
YAML
    rcli flushall >/dev/null
    "$KIQD" -C "$work/kiqd.yml" >"$work/kiqd.log" 2>&1 &
    pids=($!)
    wait_runners_idle "$mport" "$nproc_"
    local k0 c0 r0 k1 c1 r1 kw0 cw0 kw1 cw1
    kw0=$(waits --self "${pids[@]}"); cw0=$(waits --children "${pids[@]}")
    k0=$(cpu_s --self "${pids[@]}"); c0=$(cpu_s --children "${pids[@]}"); r0=$(cpu_s "$redis_pid")
    rate=$(CLASS=$1 drain "$2")
    k1=$(cpu_s --self "${pids[@]}"); c1=$(cpu_s --children "${pids[@]}"); r1=$(cpu_s "$redis_pid")
    kw1=$(waits --self "${pids[@]}"); cw1=$(waits --children "${pids[@]}")
    local pss pool; pss=$(pss_mb "${pids[@]}"); pool=$(pss_mb --children "${pids[@]}")
    stop_all
    local cpu
    cpu="CPU µs/job: kiqd $(cpu_us_per_job "$k0" "$k1" "$2"), runners $(cpu_us_per_job "$c0" "$c1" "$2"), redis $(cpu_us_per_job "$r0" "$r1" "$2"); thread wake-ups/job: kiqd $(waits_per_job "$kw0" "$kw1" "$2"), runners $(waits_per_job "$cw0" "$cw1" "$2")"
    local shape="processes $3"
    [[ $3 == default ]] && shape="default runner settings (processes $nproc_, threads $(( (CONCURRENCY + nproc_ - 1) / nproc_ )))"
    row "kiqd + ruby runner, $shape${4:+, $4 fetch}, $1" "$rate" "$pss" "concurrency $CONCURRENCY; runner pool alone (master + processes) $pool MB; $cpu"
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
    local w0 r0 w1 r1 ww0 ww1
    ww0=$(waits "${pids[@]}"); w0=$(cpu_s "${pids[@]}"); r0=$(cpu_s "$redis_pid")
    rate=$(CLASS=$1 drain "$2")
    w1=$(cpu_s "${pids[@]}"); r1=$(cpu_s "$redis_pid"); ww1=$(waits "${pids[@]}")
    local lines perjob
    lines=$(( $(wc -l <"$work/sidekiq.log") - before ))
    perjob=$(tail -n +"$((before + 1))" "$work/sidekiq.log" | grep -cE ' (start|done: .*sec)$' || true)
    local pss; pss=$(pss_mb "${pids[@]}")
    stop_all
    local quiet="log lines during drain: $lines (per-job: $perjob); CPU µs/job: sidekiq $(cpu_us_per_job "$w0" "$w1" "$2"), redis $(cpu_us_per_job "$r0" "$r1" "$2"); thread wake-ups/job: sidekiq $(waits_per_job "$ww0" "$ww1" "$2")"
    (( perjob > 0 )) && quiet="$quiet, NOT QUIET"
    row "sidekiq 6.4.1 x$3, $1" "$rate" "$pss" "concurrency $per each; $quiet"
}

for w in $WORKLOADS; do
    case $w in
        noop) set -- Bench::RubyNoop "$JOBS" ;;
        io) set -- Bench::RubyIo "$IO_JOBS" ;;
        mixed) set -- Bench::RubyMixed "$IO_JOBS" ;;
        cpu) set -- Bench::RubyCpu "$CPU_JOBS" ;;
        rails) run_rails_rows; continue ;;
        none) continue ;;
        *) die "unknown workload $w (noop io mixed cpu rails none)" ;;
    esac
    [[ -n $sidekiq_bin ]] && run_sidekiq "$1" "$2" 1
    run_kiqd_ruby "$1" "$2" default
    if [[ $w == noop || $w == cpu ]]; then
        run_kiqd_ruby "$1" "$2" 1
        run_kiqd_ruby "$1" "$2" default batched
    fi
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
    [[ $mode == runner ]] && n=$PY_JOBS
    k0=$(cpu_s --self "${pids[@]}"); c0=$(cpu_s --children "${pids[@]}")
    rate=$(CLASS=Bench::PyNoop drain "$n")
    k1=$(cpu_s --self "${pids[@]}"); c1=$(cpu_s --children "${pids[@]}")
    stop_all
    # (an exec: command's CPU is not counted: the processes are gone when it is read)
    notes="concurrency $CONCURRENCY; $n jobs"
    [[ $mode == runner ]] && notes+="; CPU µs/job: kiqd $(cpu_us_per_job "$k0" "$k1" "$n"), runners $(cpu_us_per_job "$c0" "$c1" "$n")"
    row "kiqd python $mode, Bench::PyNoop" "$rate" "-" "$notes"
done

echo
echo "| Setup | jobs/s | PSS MB | Notes |"
echo "| --- | --- | --- | --- |"
printf '%s\n' "${results[@]}"
echo
echo "JOBS=$JOBS IO_JOBS=$IO_JOBS CPU_JOBS=$CPU_JOBS RAILS_JOBS=$RAILS_JOBS CONCURRENCY=$CONCURRENCY PROCESSES=$PROCESSES, $(nproc) CPUs, $(date -u +%F)"
