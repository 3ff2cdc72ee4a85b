#!/usr/bin/env bash
# Payload memory benchmark: how much memory one large payload costs kiqd.
#
#   bench/payload_memory.sh                    # SIZES="1 4 16" (MiB), build/kiqd
#   KIQD=/tmp/kiqd-main bench/payload_memory.sh   # another build, e.g. main before the fix
#
# Environment:
#   KIQD=build/kiqd   kiqd binary
#   SIZES="1 4 16"    payload sizes in MiB (16 is just under the default 16 MiB limit)
#   CASES="noop unique fail"
#   FETCH=basic       or reliable (the acknowledgement then carries the payload too)
#
# Method, per size and case: FLUSHALL; start kiqd (concurrency 1, FETCH, queue default)
# on a private Redis; once it has written its heartbeat, read its VmHWM (peak RSS) from
# /proc/<pid>/status; LPUSH one payload whose args are `[{},{},...]` up to the size; wait until
# it is done (stat:processed = 1, or one retry entry for `fail`); read VmHWM and VmRSS again;
# SIGTERM it (by PID) and require exit 0. Cases:
#   noop    Kiqd::Noop
#   unique  Kiqd::Noop with `lock: while_executing` on its own `lock_args` (not on args)
#   fail    Kiqd::Fail with `retry: true`: the job fails and goes to the retry set
# Printed per row: the peak growth (VmHWM after - before) in MB and as a multiple of the payload
# size, and what the process still holds afterwards (VmRSS after - VmHWM before).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
KIQD=${KIQD:-$repo/build/kiqd}
SIZES=${SIZES:-"1 4 16"}
CASES=${CASES:-"noop unique fail"}
FETCH=${FETCH:-basic}

die() { echo "payload_memory: $*" >&2; exit 1; }
[[ -x $KIQD ]] || die "no kiqd binary at $KIQD"
command -v redis-server >/dev/null || die "redis-server not found"
command -v redis-cli >/dev/null || die "redis-cli not found"

# shellcheck source=lib/redis.sh
source "$here/lib/redis.sh"
work=$(mktemp -d)
redis_pid=""
kiqd_pid=""
cleanup() {
    [[ -n $kiqd_pid ]] && kill "$kiqd_pid" 2>/dev/null || true
    [[ -n $redis_pid ]] && kill "$redis_pid" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
start_redis "$(/usr/bin/python3 "$here/lib/kiqbench.py" freeport)" "$work"

cat >"$work/kiqd.yml" <<EOF
redis: {url: $redis_url}
concurrency: 1
queues: [default]
poll_interval_average: 0.5
fetch: $FETCH
EOF

status_kb() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status"; }

printf '%-8s %-7s %12s %12s %9s %12s\n' size case "peak_MB" "growth_MB" "x_size" "kept_MB"
for size in $SIZES; do
    for case in $CASES; do
        rcli flushall >/dev/null
        "$KIQD" -C "$work/kiqd.yml" >"$work/kiqd.log" 2>&1 &
        kiqd_pid=$!
        for _ in $(seq 200); do
            [[ $(rcli scard processes) -ge 1 ]] && break
            kill -0 "$kiqd_pid" 2>/dev/null || die "kiqd exited: $(cat "$work/kiqd.log")"
            sleep 0.05
        done
        before=$(status_kb "$kiqd_pid" VmHWM)
        bytes=$(PYTHONPATH="$here/lib" /usr/bin/python3 -c '
import sys, kiqbench
port, mib, case = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
head = {"noop": "{\"class\":\"Kiqd::Noop\",\"retry\":true,",
        "unique": "{\"class\":\"Kiqd::Noop\",\"retry\":true,\"lock\":\"while_executing\",\"lock_args\":[\"k\"],",
        "fail": "{\"class\":\"Kiqd::Fail\",\"retry\":true,"}[case]
head += "\"queue\":\"default\",\"jid\":\"0123456789abcdef01234567\",\"args\":["
tail = "]}"
limit = mib * 1024 * 1024 - 1024  # under the 16 MiB default limit for the largest size
n = (limit - len(head) - len(tail) + 1) // 3
payload = head + ",".join(["{}"] * n) + tail
r = kiqbench.Redis("127.0.0.1", port)
r.call("LPUSH", "queue:default", payload)
print(len(payload))
' "$port" "$size" "$case")
        for _ in $(seq 1200); do
            if [[ $case == fail ]]; then [[ $(rcli zcard retry) -ge 1 ]] && break
            else [[ $(rcli get stat:processed) -ge 1 ]] 2>/dev/null && break; fi
            sleep 0.05
        done
        if [[ $case == fail ]]; then [[ $(rcli zcard retry) -eq 1 ]] || die "$case $size MiB: no retry entry"
        else [[ $(rcli get stat:processed) -eq 1 ]] || die "$case $size MiB: not processed"; fi
        after=$(status_kb "$kiqd_pid" VmHWM)
        rss=$(status_kb "$kiqd_pid" VmRSS)
        kill -TERM "$kiqd_pid"
        code=0
        wait "$kiqd_pid" || code=$?
        kiqd_pid=""
        [[ $code -eq 0 ]] || die "kiqd exited $code: $(tail -5 "$work/kiqd.log")"
        awk -v s="$size" -v c="$case" -v b="$before" -v a="$after" -v r="$rss" -v n="$bytes" \
            'BEGIN { printf "%-8s %-7s %12.1f %12.1f %9.1f %12.1f\n", s "MiB", c, a/1024, (a-b)/1024, (a-b)*1024/n, (r-b)/1024 }'
    done
done
