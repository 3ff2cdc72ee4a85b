#!/usr/bin/env bash
# Unique jobs pushed by sidekiq-unique-jobs' client, against kiqd's own lock: three drain rows of
# no-op jobs, each job on its own identity (until_and_while_executing), at concurrency 10, each
# on a fresh private Redis, RUNS times in turn; prints every run and the medians:
#   own      args [serial], the lock declared in kiqd's config (bench/middleware_rows/unique.yml)
#   gem      as the gem 8.1's client pushes them: lock options and lock_digest in the payload,
#            the gem's client lock in Redis (kiqd releases it as the gem's server does)
#   sidekiq  the same gem-pushed jobs drained by Sidekiq 7.3 with sidekiq-unique-jobs 8.1's
#            server middleware (bench/sidekiq_unique_gem.rb), in the sidekiq73 test world
#            (scripts/world). SIDEKIQ_JOBS jobs (its rate is steady; this saves time)
# Each line: "ROW FETCH jobs/s kiqd-or-ruby-µs/job Redis-µs/job"; then "median ROW ..." and the
# gem row's share of the own row.
#
#   bench/unique_gem_rows.sh BINARY FETCH [N] [RUNS]
#     BINARY a kiqd binary   FETCH basic | batched (reliable, batch_size 50)
#     N jobs [60000]   RUNS [3]   SIDEKIQ_JOBS [5000]
#     ROWS ["own gem sidekiq"]  (e.g. ROWS="own gem" for an A/B of two binaries)
#     CMDSTATS [0]  1: after each row, Redis's INFO commandstats per job (calls, µs)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "unique_gem_rows: $*" >&2; exit 1; }
[[ $# -ge 2 ]] || die "usage: bench/unique_gem_rows.sh BINARY FETCH [N] [RUNS]"
binary=$(realpath "$1") fetch=$2 jobs=${3:-60000} runs=${4:-3}
sidekiq_jobs=${SIDEKIQ_JOBS:-5000}
[[ -x $binary ]] || die "not an executable: $1"
[[ $fetch == basic || $fetch == batched ]] || die "FETCH is basic or batched, not $fetch"
work=$(mktemp -d "${TMPDIR:-/tmp}/kiqd-ugem.XXXXXX")
redis_pid="" drain_pid=""
source "$here/lib/cleanup.sh"
source "$here/lib/redis.sh"
source "$here/lib/row_config.sh"
helper=(/usr/bin/python3 "$here/lib/kiqbench.py")

# The world's own `sidekiq` executable; scripts/world execs it, so the drained pid is Sidekiq's.
sidekiq=("$here/../scripts/world" sidekiq73 sidekiq -r "$here/sidekiq_unique_gem.rb" -c 10 -q default)

kiqd_yml() {  # ROW → the config file
    local snippet=""
    [[ $1 == own ]] && snippet=$here/middleware_rows/unique.yml
    row_yml "$fetch" "$snippet" >"$work/$1.yml"
    echo "$work/$1.yml"
}

one_row() {  # ROW
    local row=$1 n=$jobs push=--gem-unique
    [[ $row == own ]] && push=--distinct-args
    [[ $row == sidekiq ]] && n=$sidekiq_jobs
    start_redis "$("${helper[@]}" freeport)" "$work"
    "${helper[@]}" push --jobs "$n" --queue default $push | rcli --pipe >/dev/null
    rcli config resetstat >/dev/null
    local cmd=("$binary" -C "$(kiqd_yml "$row")" -c 10)
    [[ $row == sidekiq ]] && cmd=(env REDIS_URL="$redis_url" "${sidekiq[@]}")
    "${helper[@]}" drain --port "$port" --jobs "$n" --label "$row" --concurrency 10 \
        --log "$work/$row.log" --cwd "$work" --poll-ms 10 --redis-pid "$redis_pid" \
        -- "${cmd[@]}" >"$work/drain.json"
    # Client locks left once drained (the gem's 5 s wake-up tokens, :QUEUED, are not locks).
    local left
    left=$(($(rcli zcard uniquejobs:digests) +
        $(rcli keys 'uniquejobs:*:LOCKED' | grep -c . || true)))
    /usr/bin/python3 - "$work/drain.json" "$row" "$fetch" "$left" <<'PY' | tee -a "$work/rows.txt"
import json, sys
r = json.load(open(sys.argv[1]))
print(sys.argv[2], sys.argv[3], int(r["jobs_per_s"]), r["worker_cpu_us_per_job"],
      r["redis_cpu_us_per_job"], "lock-keys-left=" + sys.argv[4])
PY
    if [[ ${CMDSTATS:-0} == 1 ]]; then
        rcli info commandstats | tr -d '\r' | "${helper[@]}" cmdstats --jobs "$n"
    fi
    kill "$redis_pid" && wait "$redis_pid" 2>/dev/null || true
    redis_pid=""
}

read -r -a rows <<<"${ROWS:-own gem sidekiq}"
for _ in $(seq "$runs"); do
    for row in "${rows[@]}"; do one_row "$row"; done
done
/usr/bin/python3 - "$work/rows.txt" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    rows.setdefault(f[0], []).append((int(f[2]), float(f[3]), float(f[4])))
med = {}
for row, vals in rows.items():
    med[row] = [statistics.median(v[i] for v in vals) for i in range(3)]
    print("median", row, int(med[row][0]), med[row][1], med[row][2], "runs", len(vals),
          "jobs/s", [v[0] for v in vals])
if "own" in med and "gem" in med:
    print("gem/own %.0f %%" % (100.0 * med["gem"][0] / med["own"][0]))
PY
