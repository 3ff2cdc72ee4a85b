#!/usr/bin/env bash
# One middleware row of `bench/run` on its own, for A/B runs of a change: drains N no-op jobs
# (args [serial], as bench/run's middleware section pushes them) with the config of
# bench/middleware_rows/ROW.yml at concurrency 10, on a private Redis, then prints one line
# "ROW FETCH jobs/s kiqd-µs/job Redis-µs/job" and Redis's INFO commandstats per job for the
# commands called at least once per 100 jobs (calls per job, µs per call, µs per job; a script's
# µs include the commands it calls, which are listed too).
#
#   bench/middleware_row.sh BINARY ROW FETCH [N]
#     BINARY  a kiqd binary (any path)      ROW  plain, unique, concurrency, fair_tenant, ...
#     FETCH   basic | batched (fetch: reliable, batch_size 50)      N  jobs [60000]
#
#   A/B: for r in 1 2 3; do for b in /tmp/kiqd.old build/kiqd; do
#          bench/middleware_row.sh $b unique batched; done; done
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "middleware_row: $*" >&2; exit 1; }
[[ $# -ge 3 ]] || die "usage: bench/middleware_row.sh BINARY ROW FETCH [N]"
binary=$(realpath "$1") row=$2 fetch=$3 jobs=${4:-60000}
[[ -x $binary ]] || die "not an executable: $1"
[[ -f $here/middleware_rows/$row.yml ]] || die "no bench/middleware_rows/$row.yml"
[[ $fetch == basic || $fetch == batched ]] || die "FETCH is basic or batched, not $fetch"
work=$(mktemp -d "${TMPDIR:-/tmp}/kiqd-mwrow.XXXXXX")
redis_pid="" drain_pid=""
source "$here/lib/cleanup.sh"
source "$here/lib/redis.sh"
source "$here/lib/row_config.sh"
start_redis "$(/usr/bin/python3 "$here/lib/kiqbench.py" freeport)" "$work"
row_yml "$fetch" "$here/middleware_rows/$row.yml" >"$work/kiqd.yml"
/usr/bin/python3 "$here/lib/kiqbench.py" push --jobs "$jobs" --queue default --distinct-args |
    rcli --pipe >/dev/null
rcli config resetstat >/dev/null
/usr/bin/python3 "$here/lib/kiqbench.py" drain --port "$port" --jobs "$jobs" --label "$row" \
    --concurrency 10 --log "$work/kiqd.log" --cwd "$work" --poll-ms 10 --redis-pid "$redis_pid" \
    -- "$binary" -C "$work/kiqd.yml" -c 10 >"$work/drain.json"
/usr/bin/python3 - "$work/drain.json" "$row" "$fetch" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(sys.argv[2], sys.argv[3], int(r["jobs_per_s"]), r["worker_cpu_us_per_job"], r["redis_cpu_us_per_job"])
EOF
rcli info commandstats | tr -d '\r' |
    /usr/bin/python3 "$here/lib/kiqbench.py" cmdstats --jobs "$jobs"
