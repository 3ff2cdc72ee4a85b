#!/usr/bin/env bash
# Fetch cost of fair fetch with many tenants: one greedy tenant with GREEDY no-op jobs
# and TENANTS tenants with PER_TENANT jobs each (pushed after the greedy backlog, tenant in
# args[0]), drained by kiqd at CONCURRENCY threads with basic fetch: (a) plain queue `default`;
# (b) the same queue with `fair_fetch: {default: {arg: 0}}`. Time = from the first job taken to
# every queue (and tenant list) empty, so it is the cost of fetching (the jobs are Kiqd::Noop);
# Redis CPU seconds from INFO. RUNS rounds, each (a) then (b), on a private Redis.
#
#   GREEDY=100000 TENANTS=10000 PER_TENANT=3 CONCURRENCY=10 RUNS=1 BUILD=build bench/fair_fetch_cost.sh
#   EXTRA="fetch: reliable"       a YAML line added to both configs (batched reliable fetch)
#   BINARIES="/tmp/kiqd.old build/kiqd"   A/B: each round runs every binary in turn (plain, fair)
#   SVG=docs/fair-fetch-cost.svg          also a bar chart of µs per job (bench/lib/svg_plot.py)
#   STATS=1                               also Redis's INFO commandstats per run, per job: calls
#                                         and µs of each command (scripts as evalsha; the
#                                         bench's own polls are in eval)
#   PHASES=1                              also the run's script calls in order, summed by phase
#                                         (Redis's SLOWLOG of commands of 10 µs or more:
#                                         kiqbench.py phases): the split's calls, then the rest
#                                         in thirds; compare plain and fair phase by phase
#   PRESPLIT=all|greedy                   the fair runs start with the split already done, before
#                                         the clock, by the fetch script's own split (cut out of
#                                         src/fetch/fair_fetch.cpp): every job, or only the greedy
#                                         backlog. A bound: what fair fetch would cost if its
#                                         split cost nothing (all), or if the greedy tenant's
#                                         jobs needed no split (greedy). The split is this
#                                         checkout's, whatever BINARIES run the drains
#   PIN=1                                 Redis on CPU 0 and kiqd on CPU 1 (taskset): Redis with
#                                         a core of its own, as on a host of its own
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
GREEDY=${GREEDY:-100000} TENANTS=${TENANTS:-10000} PER_TENANT=${PER_TENANT:-3}
CONCURRENCY=${CONCURRENCY:-10} RUNS=${RUNS:-1} BUILD=${BUILD:-$repo/build}
BINARIES=${BINARIES:-$BUILD/kiqd}
die() { echo "fair_fetch_cost: $*" >&2; exit 1; }
for KIQD in $BINARIES; do [[ -x $KIQD ]] || die "build first: cmake --build $BUILD --target kiqd ($KIQD)"; done
work=$(mktemp -d "${TMPDIR:-/tmp}/kiqd-faircost.XXXXXX")
redis_pid="" kiqd_pid=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    for pid in $kiqd_pid $redis_pid; do
        if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    done
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
source "$here/lib/redis.sh"
start_redis "$(/usr/bin/python3 "$here/lib/kiqbench.py" freeport)" "$work"
pin_kiqd=()
if [[ -n ${PIN:-} ]]; then
    [[ $(nproc) -ge 2 ]] || die "PIN=1 needs two CPUs"
    taskset -pc 0 "$redis_pid" >/dev/null || die "taskset failed"
    pin_kiqd=(taskset -c 1)
fi
for mode in plain fair; do
    {
        echo "redis: {url: \"$redis_url\"}"
        echo "logging: {level: warn}"
        echo "concurrency: $CONCURRENCY"
        echo "queues: [default]"
        [[ -n ${EXTRA:-} ]] && echo "$EXTRA"
        [[ $mode == fair ]] && echo "fair_fetch: {default: {arg: 0}}"
    } >"$work/$mode.yml"
done
total=$((GREEDY + TENANTS * PER_TENANT))
if [[ -n ${PRESPLIT:-} ]]; then
    case $PRESPLIT in
        all) presplit_jobs=$total ;;
        greedy) presplit_jobs=$GREEDY ;;
        *) die "PRESPLIT is all or greedy, not $PRESPLIT" ;;
    esac
    source "$here/lib/fair_lua.sh"
    guard_lua=$(fair_lua_type_guard) || die "cannot cut the type guard out of lua_type_guard.hpp"
    split_lua=$(fair_lua_from_scan_to split) || die "cannot cut the split out of fair_fetch.cpp"
    {
        printf '%s\n' "$guard_lua"
        cat <<'LUA'
-- The fetch script's split (cut out of fair_fetch.cpp below) of the oldest ARGV[1] jobs of
-- queue:default in one go, with the settings of this bench's `fair_fetch: {default: {arg: 0}}`
-- (max_tenants: the default 10,000), as the script builds them.
local split_max = tonumber(ARGV[1])
local queues = 'queues'
local f = {mode = 'arg', field = '0', index = 1, marker = '"args":[', quoted = '"args"',
           max = 10000, name = 'default', weights = {}, ring = 'kiqd:fair:default:ring',
           list = 'queue:default@t:', queue = 'default@t:'}
LUA
        printf '%s\n' "$split_lua" "split(1, f)" "return redis.call('llen', f.ring)"
    } >"$work/presplit.lua"
fi
results=() bars=()
for ((round = 1; round <= RUNS; round++)); do
  for KIQD in $BINARIES; do
    for mode in plain fair; do
        rcli flushall >/dev/null
        /usr/bin/python3 "$here/lib/push_jobs.py" Kiqd::Noop "$GREEDY" "$TENANTS" "$PER_TENANT" | rcli --pipe >/dev/null
        [[ $(rcli llen queue:default) == "$total" ]] || die "push failed"
        if [[ $mode == fair && -n ${PRESPLIT:-} ]]; then
            rcli eval "$(cat "$work/presplit.lua")" 1 queue:default "$presplit_jobs" >/dev/null
        fi
        [[ -n ${STATS:-}${PHASES:-} ]] && rcli config resetstat >/dev/null
        if [[ -n ${PHASES:-} ]]; then
            # Room for every script call of a basic drain (~0.3 a job) and the odd slow command.
            rcli config set slowlog-max-len $((total / 2 + 1000)) >/dev/null
            rcli config set slowlog-log-slower-than 10 >/dev/null
            rcli slowlog reset >/dev/null
        fi
        cpu0=$(rcli info cpu | awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "%.2f", s}')
        # The first job taken starts the clock; done when the plain queue and the ring are empty
        # (a tenant leaves the ring when its list empties). A few LLENs a poll: a poll over every
        # queue in `queues` (10,000 tenant lists) cost Redis more than the fetches it measured.
        # The greedy tenant's list is counted too: with PRESPLIT, its first job is the first
        # taken (it is the ring's tail), so `left` falls from `left0` with it.
        poll="return redis.call('llen', KEYS[1]) + redis.call('llen', KEYS[2]) + redis.call('llen', KEYS[3])"
        poll_keys=(3 queue:default kiqd:fair:default:ring queue:default@t:greedy)
        left0=$(rcli eval "$poll" "${poll_keys[@]}")
        "${pin_kiqd[@]}" "$KIQD" -C "$work/$mode.yml" >"$work/$mode.log" 2>&1 &
        kiqd_pid=$!
        # The clock starts at the last poll that still saw every job (a small drain can end
        # within one poll: the first poll that sees a job taken may see none left).
        t0="" t1="" full_at=$(date +%s.%N)
        while :; do
            left=$(rcli eval "$poll" "${poll_keys[@]}")
            now=$(date +%s.%N)
            [[ -z $t0 && $left -lt $left0 ]] && t0=$full_at
            [[ -z $t0 ]] && full_at=$now
            [[ -n $t0 && $left == 0 ]] && { t1=$now; break; }
            kill -0 "$kiqd_pid" 2>/dev/null || die "kiqd exited: $(tail -5 "$work/$mode.log")"
            sleep 0.01
        done
        cpu1=$(rcli info cpu | awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "%.2f", s}')
        left=$(rcli eval "local n = 0 for _, q in ipairs(redis.call('smembers', 'queues')) do n = n + redis.call('llen', 'queue:' .. q) end return n" 0)
        [[ $left == 0 ]] || die "$left jobs left in tenant lists with an empty ring"
        if [[ -n ${STATS:-} ]]; then
            # cmdstat_lpush:calls=3,usec=20,usec_per_call=6.67,... → per job
            rcli info commandstats | tr -d '\r' | awk -F'[:,=]' -v total="$total" '
                /^cmdstat_/ { sub(/^cmdstat_/, "", $1)
                    printf "    %-12s %8.3f calls/job %7.3f µs/job %6.2f µs/call\n", $1, $3 / total, $5 / total, $7 }' >&2
        fi
        if [[ -n ${PHASES:-} ]]; then
            calls=$(rcli info commandstats | tr -d '\r' | awk -F'[:,=]' '/^cmdstat_evalsha:/ {print $3}')
            rcli --json slowlog get -1 | /usr/bin/python3 "$here/lib/kiqbench.py" phases \
                --jobs "$total" --calls "${calls:-0}" >&2
        fi
        # kiqd's own CPU seconds (user + system, all threads) up to here: fields 14 and 15.
        kcpu=$(awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$kiqd_pid/stat")
        kill -TERM "$kiqd_pid"; wait "$kiqd_pid" || true; kiqd_pid=""
        secs=$(/usr/bin/python3 -c "print('%.2f' % ($t1 - $t0))")
        rate=$(/usr/bin/python3 -c "print('%.0f' % ($total / ($t1 - $t0)))")
        rcpu=$(/usr/bin/python3 -c "print('%.2f' % ($cpu1 - $cpu0))")
        us=$(/usr/bin/python3 -c "print('%.1f' % (1e6 * ($t1 - $t0) / $total))")
        rus=$(/usr/bin/python3 -c "print('%.1f' % (1e6 * ($cpu1 - $cpu0) / $total))")
        echo "  round $round $KIQD $mode: $total jobs in $secs s = $rate jobs/s, $us µs per job, Redis CPU $rcpu s, kiqd CPU $kcpu s" >&2
        bars+=("${EXTRA:-basic fetch}, $mode, round $round, $(basename "$KIQD")=$us")
        kus=$(/usr/bin/python3 -c "print('%.1f' % (1e6 * $kcpu / $total))")
        results+=("| $mode, round $round, $KIQD | $total | $secs | $rate | $us | $rcpu | $rus | $kus |")
    done
  done
done
if [[ -n ${SVG:-} ]]; then
    /usr/bin/python3 "$here/lib/svg_plot.py" bars "$SVG" \
        "Fetch cost per job: $GREEDY greedy + $TENANTS tenants x $PER_TENANT no-op jobs, c=$CONCURRENCY" \
        "µs/job" "${bars[@]}" || die "svg_plot failed"
fi
echo "| run | jobs | seconds | jobs/s | µs per job | Redis CPU s | Redis CPU µs per job | kiqd CPU µs per job |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${results[@]}"
echo
echo "EXTRA='${EXTRA:-}' PRESPLIT=${PRESPLIT:-} PIN=${PIN:-} GREEDY=$GREEDY TENANTS=$TENANTS PER_TENANT=$PER_TENANT CONCURRENCY=$CONCURRENCY; load average $(cut -d' ' -f1-3 /proc/loadavg); git $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
