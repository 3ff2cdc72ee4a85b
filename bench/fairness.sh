#!/usr/bin/env bash
# The fairness experiment: one greedy tenant and many small ones on one kiqd.
#
#   bench/fairness.sh             # GREEDY=20000 jobs of JOB_MS=2 ms; TENANTS=20 × PER_TENANT=50
#   SMOKE=1 bench/fairness.sh     # CI smoke: 1,000 greedy + 5 × 10 small jobs, a few seconds;
#                                 # writes bench/results/fairness-smoke.md, no plot
#
# Environment:
#   BUILD=build            build directory with tests/kiqd_test_daemon and
#                          tests/kiqd_fairness_producer (cmake --build BUILD --target
#                          kiqd_test_daemon kiqd_fairness_producer)
#   CONCURRENCY=10         kiqd threads (-c)
#   RUNS=3                 rounds of (a), (b), (c), (d) run back to back (SMOKE: 1); the verdict
#                          uses the median over rounds of each round's ratio to its own (a), so
#                          a busy machine slows the runs it compares alike
#   GREEDY, TENANTS, PER_TENANT, JOB_MS   the workload
#   RESULTS=...            report (default bench/results/fairness.md, or -smoke.md)
#   PLOT=docs/bench/fairness.png          the plot (gnuplot); PLOT=none skips it
#   SVG=docs/fair-fetch-waits.svg         also an SVG of the last round's small tenants' waits
#                                         (bench/lib/svg_plot.py, plain Python; no gnuplot)
#
# Method, for each run — (a) "plain": one queue `default`; (b) "fair tenant": queues
# default/throttled_2x/throttled_4x weighted 6/3/1 and the YAML rules
#   Test::Record: {queue: default, fair_tenant: {arg: 1},
#     fair_tenant_queues: [{queue: throttled_2x, threshold: 50, per: 60},
#                          {queue: throttled_4x, threshold: 500, per: 60}]}:
# FLUSHALL; the greedy tenant pushes its whole backlog. Runs a, c and d push with plain Ruby
# Sidekiq::Client (bench/lib/fairness_producer.rb, Debian's Sidekiq 6.4.1, tenant in args[1]),
# which knows nothing of tenants: in run c kiqd's server side moves the greedy jobs as they
# start, in run d kiqd serves `default` with `fair_fetch: {default: {arg: 1}}`. Run b pushes
# through kiqd's client (bench/fairness_producer.cpp), whose rules reroute at push time: 50 jobs
# stay in default, 450 go to throttled_2x, the rest to throttled_4x. Then start
# kiqd_test_daemon (each job sleeps JOB_MS and records enqueued_at/start/end); the small
# tenants push their jobs one at a time, spread evenly over the backlog (job k when k/1000 of
# 95 % of it has run); wait until every job has run; stop kiqd by PID. Wait = start −
# enqueued_at; throughput = jobs / (last end − first start). The Redis server is private
# (127.0.0.1, free port, no persistence) and stopped by PID.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
fair=("/usr/bin/python3" "$here/lib/fairness.py")
kiqbench=("/usr/bin/python3" "$here/lib/kiqbench.py")

SMOKE=${SMOKE:-0}
if [[ $SMOKE == 1 ]]; then
    GREEDY=${GREEDY:-1000} TENANTS=${TENANTS:-5} PER_TENANT=${PER_TENANT:-10}
    default_results=$here/results/fairness-smoke.md default_plot=none
else
    GREEDY=${GREEDY:-20000} TENANTS=${TENANTS:-20} PER_TENANT=${PER_TENANT:-50}
    default_results=$here/results/fairness.md default_plot=$repo/docs/bench/fairness.png
fi
JOB_MS=${JOB_MS:-2}
if [[ $SMOKE == 1 ]]; then RUNS=${RUNS:-1}; else RUNS=${RUNS:-3}; fi
CONCURRENCY=${CONCURRENCY:-10}
BUILD=${BUILD:-$repo/build}
RESULTS=${RESULTS:-$default_results}
PLOT=${PLOT:-$default_plot}
DAEMON=$BUILD/tests/kiqd_test_daemon
PRODUCER=$BUILD/tests/kiqd_fairness_producer

die() { echo "fairness: $*" >&2; exit 1; }
[[ -x $DAEMON && -x $PRODUCER ]] ||
    die "build first: cmake --build $BUILD --target kiqd_test_daemon kiqd_fairness_producer"
command -v redis-server >/dev/null || die "redis-server not found"
command -v redis-cli >/dev/null || die "redis-cli not found"
ruby -rsidekiq -e 'exit 0' 2>/dev/null || die "ruby with the sidekiq gem not found (Debian: ruby-sidekiq)"
[[ $PLOT == none ]] || command -v gnuplot >/dev/null || die "gnuplot not found (scripts/install-deps)"

work=$(mktemp -d "${TMPDIR:-/tmp}/kiqd-fairness.XXXXXX")
redis_pid="" kiqd_pid=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    for pid in $kiqd_pid $redis_pid; do
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
    done
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

source "$here/lib/redis.sh"
start_redis "$("${kiqbench[@]}" freeport)" "$work"

cat >"$work/plain.yml" <<EOF
redis: {url: "$redis_url"}
logging: {level: warn}
concurrency: $CONCURRENCY
queues: [default]
EOF
cat >"$work/fair.yml" <<EOF
redis: {url: "$redis_url"}
logging: {level: warn}
concurrency: $CONCURRENCY
queues: [[default, 6], [throttled_2x, 3], [throttled_4x, 1]]
handlers:
  Test::Record:
    queue: default
    fair_tenant: {arg: 1}
    fair_tenant_queues:
      - {queue: throttled_2x, threshold: 50, per: 60}
      - {queue: throttled_4x, threshold: 500, per: 60}
EOF
cat >"$work/fairfetch.yml" <<EOF
redis: {url: "$redis_url"}
logging: {level: warn}
concurrency: $CONCURRENCY
queues: [default]
fair_fetch: {default: {arg: 1}}
EOF

total=$((GREEDY + TENANTS * PER_TENANT))
ruby_producer=(ruby -rsidekiq "$here/lib/fairness_producer.rb" "$redis_url")
run() {  # run NAME LABEL KIQD_CONFIG PRODUCER (ruby, or kiqd's producer with that config)
    local name=$1 label=$2 kiqd_cfg=$3 producer_cfg=$4
    rcli flushall >/dev/null
    if [[ $producer_cfg == ruby ]]; then
        "${ruby_producer[@]}" greedy "$GREEDY" "$JOB_MS"
    else
        "$PRODUCER" -C "$work/$producer_cfg.yml" greedy --jobs "$GREEDY" --job-ms "$JOB_MS"
    fi
    "$DAEMON" -C "$work/$kiqd_cfg.yml" >"$work/$name.log" 2>&1 &
    kiqd_pid=$!
    if [[ $producer_cfg == ruby ]]; then
        "${ruby_producer[@]}" small "$TENANTS" "$PER_TENANT" "$JOB_MS" "$GREEDY"
    else
        "$PRODUCER" -C "$work/$producer_cfg.yml" small --tenants "$TENANTS" \
            --per-tenant "$PER_TENANT" --job-ms "$JOB_MS" --spread-over "$GREEDY"
    fi
    "${fair[@]}" wait --port "$port" --jobs "$total" || { tail -n 20 "$work/$name.log" >&2; die "$name: not every job ran"; }
    kill -TERM "$kiqd_pid"
    wait "$kiqd_pid" || die "$name: kiqd exited with $?"
    kiqd_pid=""
    "${fair[@]}" analyze --port "$port" --mode "$label" --waits "$work/$name.waits" >"$work/$name.json"
    /usr/bin/python3 - "$work/$name.json" "$total" <<'EOF' || die "$name: checks failed"
import json, sys
r = json.load(open(sys.argv[1])); total = int(sys.argv[2])
ok = r["jobs"] == total and r["distinct_jids"] == total and r["retry"] == 0 and r["dead"] == 0
print("  %-12s %6d jobs in %6.2f s = %5.0f jobs/s; small tenants' wait p50 %7.1f ms, p99 %7.1f ms"
      % (r["mode"], r["jobs"], r["seconds"], r["jobs_per_s"], r["small_p50"] * 1e3,
         r["small_p99"] * 1e3), file=sys.stderr)
sys.exit(0 if ok else 1)
EOF
}

echo "fairness: GREEDY=$GREEDY TENANTS=$TENANTS PER_TENANT=$PER_TENANT JOB_MS=$JOB_MS" \
    "CONCURRENCY=$CONCURRENCY redis=127.0.0.1:$port" >&2
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for ((round = 1; round <= RUNS; round++)); do
    run "plain-$round" "(a) plain queue, round $round" plain ruby
    run "fair-$round" "(b) fair tenant, round $round" fair fair
    run "server-$round" "(c) fair tenant server side, round $round" fair ruby
    run "fairfetch-$round" "(d) fair fetch, round $round" fairfetch ruby
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

rows=()
for ((round = 1; round <= RUNS; round++)); do
    rows+=("$work/plain-$round.json" "$work/fair-$round.json" "$work/server-$round.json"
        "$work/fairfetch-$round.json")
done
table=$("${fair[@]}" table "${rows[@]}")
verdict=$("${fair[@]}" verdict "${rows[@]}")
if [[ $PLOT != none ]]; then
    mkdir -p "$(dirname "$PLOT")"
    gnuplot <<EOF || die "gnuplot failed"
set terminal pngcairo size 900,520 font ",11" noenhanced
set output "$PLOT"
set title "Small tenants' wait (enqueue to start), round $RUNS: $GREEDY greedy + $TENANTS x $PER_TENANT small jobs of $JOB_MS ms, c=$CONCURRENCY"
set xlabel "wait (ms, log scale)"
set ylabel "fraction of small tenants' jobs"
set logscale x
set grid
set key right bottom
set yrange [0:1.02]
plot "$work/plain-$RUNS.waits" using (\$1*1000):2 with steps lw 2 title "(a) one plain queue", \
     "$work/fair-$RUNS.waits" using (\$1*1000):2 with steps lw 2 title "(b) fair-tenant rerouting at push time, weights 6/3/1", \
     "$work/server-$RUNS.waits" using (\$1*1000):2 with steps lw 2 dt 2 title "(c) the same rules applied by kiqd's server side", \
     "$work/fairfetch-$RUNS.waits" using (\$1*1000):2 with steps lw 2 title "(d) fair fetch (plain producer, tenant in args)"
EOF
fi

if [[ -n ${SVG:-} ]]; then
    /usr/bin/python3 "$here/lib/svg_plot.py" cdf "$SVG" \
        "Small tenants' wait, round $RUNS: $GREEDY greedy + $TENANTS x $PER_TENANT small jobs of $JOB_MS ms, c=$CONCURRENCY" \
        "(a) one plain queue (Ruby Sidekiq::Client)=$work/plain-$RUNS.waits" \
        "(b) rerouting at push time (kiqd's client), weights 6/3/1=$work/fair-$RUNS.waits" \
        "(c) the same rules applied by kiqd's server side (Ruby client)=$work/server-$RUNS.waits" \
        "(d) fair fetch (Ruby client, tenant in args)=$work/fairfetch-$RUNS.waits" ||
        die "svg_plot failed"
fi

cpu_model=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)
git_rev=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
cmd="bench/fairness.sh"
[[ $SMOKE == 1 ]] && cmd="SMOKE=1 bench/fairness.sh"
mkdir -p "$(dirname "$RESULTS")"
cat >"$RESULTS" <<EOF
## Fairness: small tenants behind a greedy one (\`$cmd\`)

$GREEDY jobs of one greedy tenant ($JOB_MS ms each, pushed at once), $TENANTS small tenants ×
$PER_TENANT jobs pushed one at a time, spread over the backlog; kiqd_test_daemon with
$CONCURRENCY threads. (a) one plain queue; (b) fair-tenant rerouting at push time through kiqd's
client, queues default/throttled_2x/throttled_4x weighted 6/3/1, rules
{throttled_2x: > 50 per 60 s, throttled_4x: > 500 per 60 s}; (c) the same queues and rules in
kiqd, but a producer without them (plain Ruby \`Sidekiq::Client\` 6.4.1, as in (a)): kiqd's server side registers each
job as it starts and moves the greedy tenant's excess to the throttled queues; (d) the same plain producer, and
kiqd serves \`default\` with \`fair_fetch: {default: {arg: 1}}\` (tenant lists, round-robin).
(a), (c) and (d) push with plain Ruby \`Sidekiq::Client\` (push_bulk for the backlog, push for
the small tenants); (b) with kiqd's client, which applies the push-time rules.

$table

$verdict

- every job ran exactly once in every run; retry and dead sets empty; the plot shows round $RUNS
- machine: $(nproc) CPUs ($cpu_model), load average $load_start at the start and $load_end at
  the end; redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p'); git $git_rev
EOF
cat "$RESULTS"
