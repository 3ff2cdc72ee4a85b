#!/usr/bin/env bash
# Soak test: kiqd under a steady paced load for DURATION seconds, sampling its RSS.
#
#   bench/soak.sh                    # DURATION=1800 (30 min), RATE=200 jobs/s
#   DURATION=20 bench/soak.sh        # smoke run (CI): checks the script works, asserts nothing
#
# Environment:
#   DURATION=1800        seconds of load
#   RATE=200             jobs pushed per second (in 10 batches per second)
#   SAMPLE=10            seconds between RSS samples
#   CONCURRENCY=10       kiqd -c
#   KIQD=build/kiqd      kiqd binary
#   CSV=...              sample file (default: a temp dir, path printed at the end)
#
# The load is a mix that exercises every path that allocates: 90 % Kiqd::Noop, 5 % Kiqd::Sleep
# (10 ms), 3 % Kiqd::Fail with retry: false, 2 % Kiqd::Fail with retry: 1 (retry set, the
# scheduler, then the dead set). Each row of the CSV: elapsed seconds, kiqd VmRSS (kB),
# stat:processed, queue length. At the end it prints the first, last and max RSS and compares
# the mean RSS of the second half of the samples with the first half ("flat" when it grew by
# less than 10 %). It reports; it never fails on a number. redis-server (private, loopback, free
# port, no persistence), kiqd and the producer are stopped by their PIDs.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
DURATION=${DURATION:-1800}
RATE=${RATE:-200}
SAMPLE=${SAMPLE:-10}
CONCURRENCY=${CONCURRENCY:-10}
KIQD=${KIQD:-$repo/build/kiqd}
die() { echo "soak: $*" >&2; exit 1; }
[[ -x $KIQD ]] || die "no kiqd binary at $KIQD"
command -v redis-server >/dev/null || die "redis-server not found"
command -v /usr/bin/python3 >/dev/null || die "/usr/bin/python3 not found"

work=$(mktemp -d "${TMPDIR:-/tmp}/kiqd-soak.XXXXXX")
CSV=${CSV:-$work/rss.csv}
redis_pid="" kiqd_pid="" producer_pid=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    for pid in "$producer_pid" "$kiqd_pid" "$redis_pid"; do
        if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
    done
    [[ $CSV == "$work"/* ]] || rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT INT TERM

source "$here/lib/redis.sh"
start_redis "$(/usr/bin/python3 "$here/lib/kiqbench.py" freeport)" "$work"

cat >"$work/kiqd.yml" <<YAML
concurrency: $CONCURRENCY
queues: [default]
redis: {url: "redis://127.0.0.1:$port/0"}
logging: {level: warn}
poll_interval_average: 1
YAML

# The producer: a paced LPUSH loop on one socket (standard library only).
cat >"$work/producer.py" <<'PY'
import os, random, socket, sys, time
port, rate = int(sys.argv[1]), int(sys.argv[2])
sys.path.insert(0, sys.argv[3])
from kiqbench import resp  # the bench helper's RESP encoder
sock = socket.create_connection(("127.0.0.1", port))
def job(n):
    r = random.random()
    jid = os.urandom(12).hex()
    now = time.time()
    if r < 0.90: cls, args, retry = "Kiqd::Noop", "[%d]" % n, "true"
    elif r < 0.95: cls, args, retry = "Kiqd::Sleep", "[0.01]", "true"
    elif r < 0.98: cls, args, retry = "Kiqd::Fail", '["soak %d"]' % n, "false"
    else: cls, args, retry = "Kiqd::Fail", '["soak retry %d"]' % n, "1"
    return ('{"class":"%s","args":%s,"retry":%s,"queue":"default","jid":"%s",'
            '"created_at":%.6f,"enqueued_at":%.6f}' % (cls, args, retry, jid, now, now))
sock.sendall(resp("SADD", "queues", "default"))
per_tick = max(1, rate // 10)
n, start, tick = 0, time.monotonic(), 0
buf = b""
while True:
    batch = [job(n + i) for i in range(per_tick)]
    n += per_tick
    sock.sendall(resp("LPUSH", "queue:default", *batch))
    tick += 1
    # Drain the replies so the socket buffer never fills (one integer reply per LPUSH).
    sock.setblocking(False)
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk: sys.exit(0)
    except BlockingIOError:
        pass
    sock.setblocking(True)
    delay = start + tick * 0.1 - time.monotonic()
    if delay > 0: time.sleep(delay)
PY

"$KIQD" -C "$work/kiqd.yml" >"$work/kiqd.log" 2>&1 &
kiqd_pid=$!
/usr/bin/python3 "$work/producer.py" "$port" "$RATE" "$here/lib" &
producer_pid=$!
echo "soak: kiqd pid $kiqd_pid, redis port $port, $RATE jobs/s for ${DURATION}s, samples every ${SAMPLE}s"

echo "elapsed_s,rss_kb,processed,queue_len" >"$CSV"
start=$(date +%s)
while :; do
    elapsed=$(($(date +%s) - start))
    kill -0 "$kiqd_pid" 2>/dev/null || die "kiqd (pid $kiqd_pid) died; log: $work/kiqd.log"
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$kiqd_pid/status")
    processed=$(rcli get stat:processed)
    qlen=$(rcli llen queue:default)
    echo "$elapsed,$rss,${processed:-0},$qlen" >>"$CSV"
    ((elapsed >= DURATION)) && break
    sleep "$SAMPLE"
done

kill -TERM "$producer_pid"; wait "$producer_pid" 2>/dev/null || true; producer_pid=""
kill -TERM "$kiqd_pid"
kiqd_rc=0; wait "$kiqd_pid" || kiqd_rc=$?; kiqd_pid=""
echo "soak: kiqd exited with $kiqd_rc; stat:processed=$(rcli get stat:processed)" \
    "stat:failed=$(rcli get stat:failed) retry=$(rcli zcard retry) dead=$(rcli zcard dead)" \
    "queue=$(rcli llen queue:default)"
/usr/bin/python3 - "$CSV" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
rss = [int(r["rss_kb"]) for r in rows]
half = len(rss) // 2 or 1
first_mean = sum(rss[:half]) / len(rss[:half])
second = rss[half:] or rss
second_mean = sum(second) / len(second)
growth = (second_mean - first_mean) / first_mean * 100
print(f"soak: {len(rss)} samples over {rows[-1]['elapsed_s']} s; RSS first {rss[0]} kB, "
      f"last {rss[-1]} kB, max {max(rss)} kB; mean first half {first_mean:.0f} kB, "
      f"second half {second_mean:.0f} kB ({growth:+.1f} %): "
      f"{'flat' if growth < 10 else 'GROWING'}")
PY
echo "soak: samples in $CSV"
