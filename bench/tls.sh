#!/usr/bin/env bash
# TLS benchmark: what rediss:// costs kiqd. One redis-server with a plaintext port and a TLS
# port; kiqd drains a pre-filled queue of Kiqd::Noop jobs through one and then the other, with
# basic fetch and with batched reliable fetch, at concurrency 10 on loopback.
#
#   bench/tls.sh                      # JOBS=100000, RUNS=3 (the median run is reported)
#   JOBS=5000 RUNS=1 bench/tls.sh     # smoke
#
# Environment:
#   JOBS=100000 RUNS=3 CONCURRENCY=10
#   KIQD=build/kiqd         the binary under test
#   KIQD_BEFORE=            optional: a kiqd built without TLS support (the commit before it);
#                           adds the plain rows for it, to show the plain path did not get slower
#   RESULTS=bench/results/tls.md (smoke runs: tls-smoke.md)
#
# Method: as bench/core_throughput.sh (bench/lib/kiqbench.py drain): FLUSHALL, push JOBS
# payloads, start kiqd, poll LLEN on the plaintext port until the queue and the reliable
# working lists are empty; jobs/s over that time (start-up included); CPU = utime+stime of the
# kiqd process, per job in microseconds. Certificates: tests/support/tls_certs.sh (RSA 2048,
# TLS 1.3 negotiated, no client certificate). Logging at warn.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
helper=("/usr/bin/python3" "$here/lib/kiqbench.py")

JOBS=${JOBS:-100000}
RUNS=${RUNS:-3}
CONCURRENCY=${CONCURRENCY:-10}
KIQD=${KIQD:-$repo/build/kiqd}
KIQD_BEFORE=${KIQD_BEFORE:-}
if ((JOBS >= 100000)); then default_results=$here/results/tls.md
else default_results=$here/results/tls-smoke.md; fi
RESULTS=${RESULTS:-$default_results}

die() { echo "tls: $*" >&2; exit 1; }
[[ -x $KIQD ]] || die "no kiqd binary at $KIQD"
[[ -z $KIQD_BEFORE || -x $KIQD_BEFORE ]] || die "no kiqd binary at $KIQD_BEFORE"

work=$(mktemp -d "${TMPDIR:-/tmp}/kiqd-bench-tls.XXXXXX")
redis_pid=""
drain_pid=""
source "$here/lib/cleanup.sh"

sh "$repo/tests/support/tls_certs.sh" "$work/certs"
source "$here/lib/redis.sh"
tls_port=$("${helper[@]}" freeport)
start_redis "$("${helper[@]}" freeport)" "$work" --tls-port "$tls_port" \
    --tls-cert-file "$work/certs/server.crt" --tls-key-file "$work/certs/server.key" \
    --tls-ca-cert-file "$work/certs/ca.crt" --tls-auth-clients no

write_config() {  # FILE URL [TLS_YAML] FETCH_YAML
    printf 'redis: {url: "%s"%s}\nlogging: {level: warn}\nqueues: [default]\n%s\n' \
        "$2" "$3" "$4" >"$1"
}
tls_yaml=", tls: {ca_file: \"$work/certs/ca.crt\"}"
plain_url=$redis_url
tls_url="rediss://127.0.0.1:$tls_port/0"
write_config "$work/plain-basic.yml" "$plain_url" "" "fetch: basic"
write_config "$work/tls-basic.yml" "$tls_url" "$tls_yaml" "fetch: basic"
write_config "$work/plain-batched.yml" "$plain_url" "" \
    "fetch: reliable
reliable_fetch: {batch_size: 50}"
write_config "$work/tls-batched.yml" "$tls_url" "$tls_yaml" \
    "fetch: reliable
reliable_fetch: {batch_size: 50}"

results_jsonl="$work/results.jsonl"
: >"$results_jsonl"

run_one() {  # LABEL BINARY CONFIG
    rcli flushall >/dev/null
    "${helper[@]}" push --jobs "$JOBS" --queue default | rcli --pipe >"$work/pipe.out" 2>&1 ||
        die "redis-cli --pipe failed: $(cat "$work/pipe.out")"
    "${helper[@]}" drain --port "$port" --jobs "$JOBS" --queue default --label "$1" \
        --concurrency "$CONCURRENCY" --log "$work/worker.log" --cwd "$work" \
        -- "$2" -C "$3" -c "$CONCURRENCY" >"$work/one.json" &
    drain_pid=$!
    wait "$drain_pid" || { drain_pid=""; tail -n 20 "$work/worker.log" >&2; die "run failed: $1"; }
    drain_pid=""
    /usr/bin/python3 - "$work/one.json" "$JOBS" <<'PY' >&2
import json, sys
r = json.load(open(sys.argv[1]))
assert r["stat_processed"] == int(sys.argv[2]) and r["exit_code"] == 0, r
print("  %-34s %9.0f jobs/s  cpu %.2f s = %.1f us/job" % (
    r["system"], r["jobs_per_s"], r["worker_cpu_s"], 1e6 * r["worker_cpu_s"] / r["jobs"]))
PY
    cat "$work/one.json" >>"$results_jsonl"
}

echo "tls: JOBS=$JOBS RUNS=$RUNS c=$CONCURRENCY plain port $port, TLS port $tls_port" >&2
for ((run = 1; run <= RUNS; run++)); do
    for mode in basic batched; do
        [[ -n $KIQD_BEFORE ]] && run_one "plain $mode (before TLS)" "$KIQD_BEFORE" "$work/plain-$mode.yml"
        run_one "plain $mode" "$KIQD" "$work/plain-$mode.yml"
        run_one "tls $mode" "$KIQD" "$work/tls-$mode.yml"
    done
done

table=$(/usr/bin/python3 - "$results_jsonl" <<'PY'
import json, sys, statistics
rows = {}
order = []
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["system"] not in rows:
        order.append(r["system"])
    rows.setdefault(r["system"], []).append(r)
def median(runs):
    return sorted(runs, key=lambda r: r["jobs_per_s"])[len(runs) // 2]
picked = {k: median(v) for k, v in rows.items()}
print("| fetch, transport | jobs/s (median) | range | CPU per job | vs plain |")
print("| --- | ---: | ---: | ---: | ---: |")
for k in order:
    p = picked[k]
    mode = "basic" if "basic" in k else "batched"
    base = picked.get("plain " + mode)
    vs = "%.0f %%" % (100.0 * p["jobs_per_s"] / base["jobs_per_s"]) if base else "n/a"
    lo = min(r["jobs_per_s"] for r in rows[k]); hi = max(r["jobs_per_s"] for r in rows[k])
    print("| %s | %.0f | %.0f–%.0f | %.1f µs | %s |" % (
        k, p["jobs_per_s"], lo, hi, 1e6 * p["worker_cpu_s"] / p["jobs"], vs))
PY
)
cpu_model=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)
git_rev=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
report=$(
    cat <<EOF2
## kiqd over TLS vs plain TCP (Kiqd::Noop, c$CONCURRENCY, loopback)

$table

- basic: \`fetch: basic\` (BRPOP per job); batched: \`fetch: reliable\` with \`batch_size: 50\`
- jobs/s: $JOBS jobs, worker start to empty queue; CPU per job: kiqd's utime+stime / jobs
- machine: $(nproc) CPUs, ${cpu_model:-unknown CPU}, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end; git $git_rev
- command: \`JOBS=$JOBS RUNS=$RUNS${KIQD_BEFORE:+ KIQD_BEFORE=…} bench/tls.sh\` ($(date -u +%Y-%m-%dT%H:%MZ))
EOF2
)
echo
echo "$report"
mkdir -p "$(dirname "$RESULTS")"
echo "$report" >"$RESULTS"
