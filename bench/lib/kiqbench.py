#!/usr/bin/python3
"""Helpers for bench/run and the other bench scripts (standard library only).

Subcommands:
  freeport                      print a free TCP port on 127.0.0.1
  push  --jobs N --batch B      write RESP for SADD queues + LPUSH of N
                                Sidekiq-shaped Kiqd::Noop payloads to stdout
                                (pipe into `redis-cli --pipe`)
  drain --port P --jobs N ...   start a worker command, time how long it takes
        -- CMD ARGS...          to empty queue:<q>, sample its peak RSS/CPU,
                                its and redis-server's (--redis-pid) CPU per job
                                over the drain, count the log lines it wrote
                                (and those naming a jid), stop it by PID with
                                SIGTERM, check the stats; print one JSON object
  latency ...                   enqueue->start percentiles at a paced rate
  report --results F ...        bench/run's markdown tables and gnuplot PNGs
  table --results F ...         render the JSON lines of F as a markdown table
(report and table live in kiqbench_report.py.)
"""

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

from kiqbench_report import cmd_report, cmd_table


# ---------------------------------------------------------------- RESP client

class Redis:
    """Just enough RESP2 for LLEN/GET/INFO/ZCARD on one persistent socket."""

    def __init__(self, host, port):
        self.sock = socket.create_connection((host, port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError("redis error: " + rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n).decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RuntimeError("bad RESP reply: %r" % line)

    def call(self, *args):
        self.sock.sendall(resp(*args))
        return self._reply()

    def cpu_seconds(self):
        info = self.call("INFO", "cpu")
        fields = dict(l.split(":", 1) for l in info.splitlines() if ":" in l)
        return float(fields["used_cpu_sys"]) + float(fields["used_cpu_user"])


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


# ------------------------------------------------------------------ freeport

def cmd_freeport(_args):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        print(s.getsockname()[1])


def cmd_cmdstats(args):
    """Redis's INFO commandstats (on stdin) per job: calls, µs per call and µs per job of each
    command called at least once per 100 jobs (commands run inside scripts included)."""
    n = args.jobs
    for line in sys.stdin:
        m = re.match(r"cmdstat_([\w|]+):calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)", line)
        if m and int(m[2]) * 100 >= n:
            print("%s%-16s %6.3f calls/job  %7.2f us/call  %6.2f us/job"
                  % (" " * args.indent, m[1], int(m[2]) / n, float(m[4]), int(m[3]) / n))


def cmd_phases(args):
    """A drain's script calls in order, summed by phase, from SLOWLOG GET as `redis-cli --json`
    prints it (on stdin): the first ceil(jobs / 2000) calls (while a fair queue's plain list
    still held jobs to split, 2000 a call), then the rest in --chunks equal parts."""
    # Each entry: [id, time, µs, [command, args...], client, name]; newest first.
    entries = sorted(json.load(sys.stdin), key=lambda e: e[0])
    us = [e[2] for e in entries if e[3] and e[3][0].lower() == "evalsha"]
    pad = " " * args.indent
    print(f"{pad}script calls recorded (10 µs or more): {len(us)} of {args.calls},"
          f" {sum(us) / 1000:.1f} ms of Redis time")
    split = -(-args.jobs // 2000)
    bounds = [(0, split, f"calls 1-{split} (a fair queue splits its plain list here)")]
    rest = len(us) - split
    for k in range(args.chunks):
        a, b = split + rest * k // args.chunks, split + rest * (k + 1) // args.chunks
        bounds.append((a, b, f"calls {a + 1}-{b}"))
    for a, b, label in bounds:
        part = us[a:b]
        if part:
            print(f"{pad}  {label}: {sum(part) / 1000:.1f} ms, {sum(part) / len(part):.1f} µs a call")


# ---------------------------------------------------------------------- push

def cmd_push(args):
    """Payloads exactly as Sidekiq 6.4.1's Client#push produces them for a
    `class Noop; include Sidekiq::Worker; end` with default options."""
    out = sys.stdout.buffer
    out.write(resp("SADD", "queues", args.queue))
    key = "queue:" + args.queue
    left = args.jobs
    serial = 0
    while left > 0:
        n = min(args.batch, left)
        now = time.time()
        payloads = []
        client_locks = []  # --gem-unique: the client lock the gem's client takes per push
        for _ in range(n):
            job = {"retry": True, "queue": args.queue, "class": args.job_class,
                   "args": [], "jid": os.urandom(12).hex(),
                   "created_at": now, "enqueued_at": now}
            if args.unique:  # as sidekiq-unique-jobs' client writes them; distinct identities
                serial += 1
                job["lock"] = "until_and_while_executing"
                job["lock_args"] = [serial]
            elif args.gem_unique:  # what sidekiq-unique-jobs 8.1's client pushes, lock included
                serial += 1
                # The gem's digest (LockDigest: MD5 of the sorted pairs), which its server
                # computes again from the payload.
                pairs = [["class", args.job_class], ["lock_args", [serial]], ["queue", args.queue]]
                digest = "uniquejobs:" + hashlib.md5(
                    json.dumps(pairs, separators=(",", ":")).encode()).hexdigest()
                job["args"] = [serial]
                job.update({"lock": "until_and_while_executing", "lock_timeout": 0,
                            "lock_ttl": None, "lock_prefix": "uniquejobs",
                            "lock_args": [serial], "lock_digest": digest})
                score = repr(now)
                client_locks.append(resp("SET", digest, job["jid"]))
                client_locks.append(resp("HSET", digest + ":LOCKED", job["jid"], score))
                client_locks.append(resp("ZADD", "uniquejobs:digests", score, digest))
            elif args.distinct_args:  # args [serial]: per-class middleware see distinct jobs
                serial += 1
                job["args"] = [serial]
            payloads.append(json.dumps(job, separators=(",", ":")))
        out.write(b"".join(client_locks))
        out.write(resp("LPUSH", key, *payloads))
        left -= n
    out.flush()


# --------------------------------------------------------------------- drain

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_status_kb(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def proc_cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2:].split()
    # fields[0] is field 3 (state); utime/stime are fields 14/15
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def count_log_lines(path, start):
    """Lines in `path` from byte `start` on, and how many of them name a jid (per-job lines)."""
    lines = job_lines = 0
    with open(path, "rb") as f:
        f.seek(start)
        for line in f:
            lines += 1
            if b"jid=" in line:
                job_lines += 1
    return lines, job_lines


def stop_child(child, timeout):
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
    try:
        return child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()  # by PID, after a graceful stop failed
        child.wait()
        return None


def cmd_drain(args):
    r = Redis("127.0.0.1", args.port)
    key = "queue:" + args.queue
    queued = r.call("LLEN", key)
    if queued != args.jobs:
        sys.exit("drain: expected %d jobs in %s, found %d" % (args.jobs, key, queued))
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    log = open(args.log, "ab")

    child = None

    def on_signal(signo, _frame):
        if child is not None:
            stop_child(child, 30)
        sys.exit(128 + signo)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    # Redis CPU from /proc/<redis pid>/stat when its PID is given (what bench/run does), else
    # from INFO cpu.
    def redis_cpu():
        return proc_cpu_seconds(args.redis_pid) if args.redis_pid else r.cpu_seconds()

    log.flush()
    log_start = os.path.getsize(args.log)  # this run's output starts here (the log is shared)
    redis_cpu0 = redis_cpu()
    t0 = time.monotonic()
    child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=args.cwd,
                             stdin=subprocess.DEVNULL)
    poll = args.poll_ms / 1000.0
    first_take = None
    hwm_kb = None
    # CPU per job is taken over the drain proper: from the poll that first sees a job taken to
    # the poll that sees the queue empty, so process start-up (a Ruby boot costs ~0.5 s of CPU)
    # does not count. utime + stime of the worker and of redis-server, clock ticks.
    worker_cpu_take = redis_cpu_take = None
    while True:
        n = r.call("LLEN", key)
        now = time.monotonic()
        if first_take is None and n < args.jobs:
            first_take = now - t0
            worker_cpu_take = proc_cpu_seconds(child.pid)
            redis_cpu_take = redis_cpu()
        if n == 0:
            # Reliable fetch: a job leaves its working list once its outcome is written, so
            # the drain ends when those are empty too (batched fetch holds up to batch_size
            # jobs there after the queue is empty).
            working = r.call("SMEMBERS", "kiqd:reliable:working") or []
            if all(r.call("LLEN", w) == 0 for w in working):
                drained = time.monotonic() - t0
                worker_cpu_drain = proc_cpu_seconds(child.pid) - worker_cpu_take
                redis_cpu_drain = redis_cpu() - redis_cpu_take
                break
        if child.poll() is not None:
            sys.exit("drain: worker exited with %s before the queue was empty (%d left); see %s"
                     % (child.returncode, n, args.log))
        if now - t0 > args.timeout:
            stop_child(child, 30)
            sys.exit("drain: timeout after %.0f s with %d jobs left" % (args.timeout, n))
        time.sleep(poll)
    # The queue is empty, but with basic fetch up to `concurrency` jobs may still be on their
    # way to threads (a BRPOP reply in flight, one ms longer through the latency proxy): a job
    # fetched after SIGTERM is pushed back, not run. Give them a moment before stopping; the
    # drain time above is not extended by it.
    time.sleep(0.25)
    # Sample before SIGTERM, as asked: VmHWM is the peak RSS over the process life.
    hwm_kb = proc_status_kb(child.pid, "VmHWM")
    threads = proc_status_kb(child.pid, "Threads")
    worker_cpu = proc_cpu_seconds(child.pid)
    redis_cpu_total = redis_cpu() - redis_cpu0
    # What the worker wrote from its start until now (queue empty plus the settling moment,
    # before SIGTERM, so shutdown lines do not count). A per-job line names the job's jid in
    # both kiqd's and Sidekiq's formats ("class=Kiqd::Noop jid=... start").
    log_lines, job_lines = count_log_lines(args.log, log_start)
    t_stop = time.monotonic()
    rc = stop_child(child, args.stop_timeout)
    stop_s = time.monotonic() - t_stop
    log.close()

    processed = int(r.call("GET", "stat:processed") or 0)
    failed = int(r.call("GET", "stat:failed") or 0)
    result = {
        "system": args.label, "concurrency": args.concurrency, "jobs": args.jobs,
        "seconds": round(drained, 4), "jobs_per_s": round(args.jobs / drained, 1),
        "first_take_s": None if first_take is None else round(first_take, 4),
        "peak_rss_mb": round(hwm_kb / 1024.0, 1), "threads": threads,
        "worker_cpu_s": round(worker_cpu, 2), "redis_cpu_s": round(redis_cpu_total, 2),
        "drain_worker_cpu_s": round(worker_cpu_drain, 3),
        "drain_redis_cpu_s": round(redis_cpu_drain, 3),
        "worker_cpu_us_per_job": round(1e6 * worker_cpu_drain / args.jobs, 2),
        "redis_cpu_us_per_job": round(1e6 * redis_cpu_drain / args.jobs, 2),
        "log_lines": log_lines, "log_job_lines": job_lines,
        "stop_s": round(stop_s, 3), "exit_code": rc,
        "stat_processed": processed, "stat_failed": failed,
        "retry": r.call("ZCARD", "retry"), "dead": r.call("ZCARD", "dead"),
        "left": r.call("LLEN", key),
    }
    problems = []
    if rc != 0:
        problems.append("exit code %s (expected 0 after SIGTERM)" % rc)
    if processed != args.jobs:
        problems.append("stat:processed=%d, expected %d" % (processed, args.jobs))
    if failed or result["retry"] or result["dead"] or result["left"]:
        problems.append("failed=%d retry=%d dead=%d left=%d" % (
            failed, result["retry"], result["dead"], result["left"]))
    result["problems"] = problems
    result["section"] = args.section
    result.update(json.loads(args.extra))
    print(json.dumps(result))
    if problems:
        print("drain: %s: %s (log: %s)" % (args.label, "; ".join(problems), args.log),
              file=sys.stderr)
        sys.exit(3)


# ------------------------------------------------------------------- latency

def percentile(sorted_values, q):
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return None
    k = max(0, min(len(sorted_values) - 1, int(round(q / 100.0 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


def cmd_latency(args):
    """Starts a worker, pushes Test::Record jobs at a paced rate (LPUSH every ms of what is due,
    each payload stamped with enqueued_at just before its push), waits until every job recorded
    its start in kiqd-test:ran, and prints enqueue->start latency percentiles as JSON. With
    --queues N, each job goes to one of q0..q<N-1> at random (seeded) instead of --queue."""
    r = Redis("127.0.0.1", args.port)
    spread = random.Random(args.queues)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    log = open(args.log, "ab")
    child = None

    def on_signal(signo, _frame):
        if child is not None:
            stop_child(child, 30)
        sys.exit(128 + signo)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=args.cwd,
                             stdin=subprocess.DEVNULL)
    # Ready = registered in `processes` (its first heartbeat), then a little settling time.
    deadline = time.monotonic() + 60
    while not r.call("SMEMBERS", "processes"):
        if child.poll() is not None or time.monotonic() > deadline:
            stop_child(child, 30)
            sys.exit("latency: worker did not start; see %s" % args.log)
        time.sleep(0.05)
    time.sleep(1.0)
    total = int(args.rate * args.seconds)
    enqueued = {}
    sent = 0
    t0 = time.monotonic()
    while sent < total:
        now = time.monotonic()
        due = min(total, int((now - t0) * args.rate) + 1)
        if due > sent:
            by_queue = {}
            stamp = time.time()
            for _ in range(due - sent):
                jid = os.urandom(12).hex()
                enqueued[jid] = stamp
                queue = "q%d" % spread.randrange(args.queues) if args.queues else args.queue
                by_queue.setdefault(queue, []).append(json.dumps(
                    {"retry": True, "queue": queue, "class": "Test::Record", "args": [],
                     "jid": jid, "created_at": stamp, "enqueued_at": stamp},
                    separators=(",", ":")))
            for queue, payloads in by_queue.items():
                r.call("LPUSH", "queue:" + queue, *payloads)
            sent = due
        else:
            time.sleep(max(0.0, min(0.001, sent / args.rate - (now - t0))))
    push_s = time.monotonic() - t0
    deadline = time.monotonic() + 120
    while r.call("LLEN", "kiqd-test:ran") < total:
        if child.poll() is not None or time.monotonic() > deadline:
            stop_child(child, 30)
            sys.exit("latency: only %s of %d jobs ran; see %s"
                     % (r.call("LLEN", "kiqd-test:ran"), total, args.log))
        time.sleep(0.02)
    hwm_kb = proc_status_kb(child.pid, "VmHWM")
    rc = stop_child(child, 60)
    log.close()
    lat = []
    for entry in r.call("LRANGE", "kiqd-test:ran", 0, -1):
        e = json.loads(entry)
        if e["jid"] in enqueued:
            lat.append((e["started"] - enqueued[e["jid"]]) * 1000.0)
    lat.sort()
    result = {
        "section": args.section, "system": args.label, "concurrency": args.concurrency,
        "rate": args.rate, "jobs": total, "push_s": round(push_s, 3),
        "achieved_rate": round(total / push_s, 1) if push_s > 0 else None,
        "p50_ms": round(percentile(lat, 50), 3), "p99_ms": round(percentile(lat, 99), 3),
        "max_ms": round(lat[-1], 3), "peak_rss_mb": round(hwm_kb / 1024.0, 1),
        "exit_code": rc, "recorded": len(lat),
    }
    result.update(json.loads(args.extra))
    print(json.dumps(result))
    if rc != 0 or len(lat) != total:
        print("latency: %s: exit %s, %d of %d recorded" % (args.label, rc, len(lat), total),
              file=sys.stderr)
        sys.exit(3)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("freeport")
    p = sub.add_parser("push")
    p.add_argument("--jobs", type=int, required=True)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--queue", default="default")
    p.add_argument("--job-class", default="Kiqd::Noop")
    p.add_argument("--unique", action="store_true",
                   help="lock: until_and_while_executing with a distinct identity per job")
    p.add_argument("--distinct-args", action="store_true", help="args [serial] per job")
    p.add_argument("--gem-unique", action="store_true",
                   help="as sidekiq-unique-jobs 8.1's client pushes an until_and_while_executing "
                        "job: args [serial], its lock options and lock_digest in the payload, "
                        "its client lock in Redis")
    d = sub.add_parser("drain")
    d.add_argument("--port", type=int, required=True)
    d.add_argument("--jobs", type=int, required=True)
    d.add_argument("--queue", default="default")
    d.add_argument("--label", required=True)
    d.add_argument("--concurrency", type=int, required=True)
    d.add_argument("--log", required=True)
    d.add_argument("--cwd", default=None)
    d.add_argument("--poll-ms", type=float, default=20)
    d.add_argument("--timeout", type=float, default=1800)
    d.add_argument("--stop-timeout", type=float, default=60)
    d.add_argument("--section", default="")
    d.add_argument("--redis-pid", type=int, default=0,
                   help="redis-server's PID: its CPU from /proc (else INFO cpu)")
    d.add_argument("--extra", default="{}", help="JSON merged into the result")
    d.add_argument("command", nargs=argparse.REMAINDER)
    la = sub.add_parser("latency")
    la.add_argument("--port", type=int, required=True)
    la.add_argument("--rate", type=float, required=True)
    la.add_argument("--seconds", type=float, required=True)
    la.add_argument("--queue", default="default")
    la.add_argument("--queues", type=int, default=0,
                    help="spread the jobs at random over q0..q<N-1> instead of --queue")
    la.add_argument("--label", required=True)
    la.add_argument("--concurrency", type=int, required=True)
    la.add_argument("--log", required=True)
    la.add_argument("--cwd", default=None)
    la.add_argument("--section", default="latency")
    la.add_argument("--extra", default="{}")
    la.add_argument("command", nargs=argparse.REMAINDER)
    rp = sub.add_parser("report")
    rp.add_argument("--results", required=True)
    rp.add_argument("--out", required=True, help="directory for the PNGs and data files")
    rp.add_argument("--markdown", required=True)
    rp.add_argument("--notes", default="")
    cs = sub.add_parser("cmdstats")
    cs.add_argument("--jobs", type=int, required=True)
    cs.add_argument("--indent", type=int, default=2)
    ph = sub.add_parser("phases")
    ph.add_argument("--jobs", type=int, required=True)
    ph.add_argument("--calls", type=int, required=True, help="script calls (commandstats)")
    ph.add_argument("--chunks", type=int, default=3)
    ph.add_argument("--indent", type=int, default=4)
    t = sub.add_parser("table")
    t.add_argument("--results", required=True)
    t.add_argument("--baseline", default="sidekiq")
    args = ap.parse_args()
    {"freeport": cmd_freeport, "push": cmd_push, "drain": cmd_drain,
     "table": cmd_table, "latency": cmd_latency, "report": cmd_report,
     "cmdstats": cmd_cmdstats, "phases": cmd_phases}[args.cmd](args)


if __name__ == "__main__":
    main()
