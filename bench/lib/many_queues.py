"""One drain run of bench/many_queues.sh: pushes --jobs Kiqd::Noop jobs (Sidekiq 6.4.1's
payload shape) spread at random over the first --filled of queues q0..q<N-1>, starts the worker
command, polls until every queue (and every reliable working list) is empty, stops the worker
by PID, and prints one JSON line: jobs/s from worker start to empty queues, and the worker's and
redis-server's CPU per job over the drain proper (from the first job taken).
`many_queues.py summary RESULTS`: the medians of a run with REPEAT rounds."""
import argparse
import json
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kiqbench import Redis, proc_cpu_seconds, resp, stop_child  # noqa: E402

# The queues' total length in one call per poll, so that polling 500 queues costs Redis one
# short script every --poll-ms rather than 500 commands.
TOTAL = ("local n = 0 for i = 1, #KEYS do n = n + redis.call('llen', KEYS[i]) end "
         "for _, w in ipairs(redis.call('smembers', 'kiqd:reliable:working')) do "
         "n = n + redis.call('llen', w) end return n")


def push(r, queues, filled, jobs, seed):
    rng = random.Random(seed)
    by_queue = {}
    now = time.time()
    for _ in range(jobs):
        q = "q%d" % rng.randrange(filled)
        job = {"retry": True, "queue": q, "class": "Kiqd::Noop", "args": [],
               "jid": "%024x" % rng.getrandbits(96), "created_at": now, "enqueued_at": now}
        by_queue.setdefault(q, []).append(json.dumps(job, separators=(",", ":")))
    out = [resp("SADD", "queues", *["q%d" % i for i in range(queues)])]
    for q, payloads in by_queue.items():
        for i in range(0, len(payloads), 1000):
            out.append(resp("LPUSH", "queue:" + q, *payloads[i:i + 1000]))
    r.sock.sendall(b"".join(out))
    for _ in out:
        r._reply()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--redis-pid", type=int, required=True)
    p.add_argument("--queues", type=int, required=True)
    p.add_argument("--filled", type=int, required=True)
    p.add_argument("--jobs", type=int, required=True)
    p.add_argument("--label", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--poll-ms", type=float, default=20)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    r = Redis("127.0.0.1", args.port)
    r.call("FLUSHALL")
    push(r, args.queues, args.filled, args.jobs, seed=args.queues * 1000 + args.filled)
    sha = r.call("SCRIPT", "LOAD", TOTAL)
    keys = ["queue:q%d" % i for i in range(args.queues)]

    def total():
        return r.call("EVALSHA", sha, str(len(keys)), *keys)

    assert total() == args.jobs, "push: expected %d jobs" % args.jobs
    log = open(args.log, "ab")
    cpu0 = proc_cpu_seconds(args.redis_pid)
    t0 = time.monotonic()
    child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    worker_take = redis_take = None
    try:
        while True:
            n = total()
            if worker_take is None and n < args.jobs:
                worker_take = proc_cpu_seconds(child.pid)
                redis_take = proc_cpu_seconds(args.redis_pid)
            if n == 0:
                drained = time.monotonic() - t0
                worker_cpu = proc_cpu_seconds(child.pid) - worker_take
                redis_cpu = proc_cpu_seconds(args.redis_pid) - redis_take
                break
            if child.poll() is not None:
                sys.exit("many_queues: worker exited with %s, %d jobs left" % (child.returncode, n))
            if time.monotonic() - t0 > args.timeout:
                sys.exit("many_queues: timeout with %d jobs left" % n)
            time.sleep(args.poll_ms / 1000.0)
    finally:
        rc = stop_child(child, 60)
    processed = int(r.call("GET", "stat:processed") or 0)
    print(json.dumps({
        "system": args.label, "queues": args.queues, "filled": args.filled, "jobs": args.jobs,
        "seconds": round(drained, 3), "jobs_per_s": round(args.jobs / drained, 1),
        "worker_cpu_us_per_job": round(1e6 * worker_cpu / args.jobs, 2),
        "redis_cpu_us_per_job": round(1e6 * redis_cpu / args.jobs, 2),
        "exit_code": rc, "stat_processed": processed, "cpu_before_run_s": round(cpu0, 2),
    }))
    if rc != 0:
        sys.exit("many_queues: worker exit code %s after SIGTERM" % rc)


def summary(path):
    """The rows of a REPEAT run: median jobs/s and CPU per row, and the median over rounds of
    the row's rate as a share of the same system's one-queue rate in that round (rates drift
    with the machine's load between rounds; a round's rows ran minutes apart at most)."""
    rows = [json.loads(line) for line in open(path) if line.strip()]
    one = {(r["system"], r.get("round")): r["jobs_per_s"] for r in rows
           if r["queues"] == 1 and r["filled"] == 1}
    groups = {}
    for r in rows:
        groups.setdefault((r["system"], r["queues"], r["filled"]), []).append(r)

    def median(xs):
        xs = sorted(xs)
        return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2

    one_redis = {system: median([r["redis_cpu_us_per_job"] for r in rs])
                 for (system, queues, filled), rs in groups.items() if queues == 1 and filled == 1}
    print("many_queues: medians over %d round(s)" % max(r.get("round", 1) for r in rows))
    for (system, queues, filled), rs in groups.items():
        shares = [100.0 * r["jobs_per_s"] / one[(system, r.get("round"))] for r in rs
                  if (system, r.get("round")) in one]
        print("  %-28s %3d queues, %3d filled  %8.0f jobs/s (%s)  CPU/job %5.1f + redis %5.1f us%s"
              % (system, queues, filled, median([r["jobs_per_s"] for r in rs]),
                 ", ".join("%.0f" % r["jobs_per_s"] for r in rs),
                 median([r["worker_cpu_us_per_job"] for r in rs]),
                 median([r["redis_cpu_us_per_job"] for r in rs]),
                 "  %3.0f %% of 1 queue (%s), Redis %.1fx" % (
                     median(shares), ", ".join("%.0f" % x for x in shares),
                     median([r["redis_cpu_us_per_job"] for r in rs]) / one_redis[system])
                 if shares and queues > 1 and one_redis.get(system) else ""))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "summary":
        summary(sys.argv[2])
    else:
        main()
