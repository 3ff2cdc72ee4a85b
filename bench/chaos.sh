#!/usr/bin/env bash
# Chaos run: three kiqd processes (batched reliable fetch, basic fetch, a Python runner pool) on
# one private Redis (AOF, appendfsync always), a steady mix of jobs (plain, quick 50-200 ms,
# unique, concurrency limited, throttled, paused and resumed, failing once, cron), and faults on a
# seeded schedule (kill -9 of kiqd, of a runner child and of Redis, SIGTERM deploys, SIGSTOP past
# the liveness TTL, 200 ms of latency, cut connections, Redis unreachable, Redis refusing writes:
# out of memory or MISCONF). After a drain it checks, from the
# jobs' own append-only ledgers: nothing lost, every duplicate run explained by a documented
# window, no two runs of one unique identity at once, the concurrency limit never exceeded,
# each cron tick once, no lock or slot left behind, Sidekiq's processed/failed counts agree.
# Exit 0 when every check passes, 1 otherwise (the files are then kept and their path printed).
# What each check means and the figures of a 30-minute run: docs/reliability.md.
#
#   bench/chaos.sh                              # 2 minutes, seed 1 (as CI runs it)
#   SEED=7 DURATION=1800 FAULT_EVERY=10 bench/chaos.sh   # 30 minutes, ~140 faults
#
# Environment:
#   SEED=1            the fault schedule and the job mix (same seed: same schedule)
#   DURATION=120      seconds of load and faults, before the drain
#   RATE=8            jobs pushed per second
#   FAULT_EVERY=8     seconds between faults, on average (one at a time)
#   DRAIN_TIMEOUT=300 seconds the drain may take
#   BUILD=build       where kiqd, latency_proxy and chaos_job are
#                     (cmake --build build --target kiqd latency_proxy chaos_job)
#   WORK=             keep every file in this directory (default: a temporary one, removed
#                     after a passing run unless KEEP=1)
# Needs redis-server and /usr/bin/python3. Everything listens on 127.0.0.1 (free ports) and is
# stopped by its PID.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export BUILD=${BUILD:-$here/../build}
command -v redis-server >/dev/null || { echo "chaos: redis-server not found" >&2; exit 1; }
exec /usr/bin/python3 "$here/lib/chaos.py"
