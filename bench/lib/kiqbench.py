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


# --------------------------------------------------------------------- table

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


# -------------------------------------------------------------------- report

def median_rows(rows, key):
    groups = {}
    order = []
    for row in rows:
        k = key(row)
        if k not in groups:
            order.append(k)
        groups.setdefault(k, []).append(row)
    out = []
    for k in order:
        runs = sorted(groups[k], key=lambda r: r.get("jobs_per_s") or r.get("p99_ms") or 0)
        pick = dict(runs[(len(runs) - 1) // 2])
        pick["runs"] = len(runs)
        out.append(pick)
    return out


def fmt_ratio(a, b):
    return "%.1f×" % (a / b) if a and b else "n/a"


def log_mode(r):
    """"quiet" (warn) or "default" (info); rows written before bench/run recorded it were quiet."""
    return r.get("log", "quiet")


def sidekiq_versions(rows):
    """The Sidekiq versions that have rows, in the order they first appear."""
    out = []
    for r in rows:
        if r.get("kind") == "sidekiq":
            v = r.get("sidekiq") or r["system"].split()[1]
            if v not in out:
                out.append(v)
    return out


def sidekiq_base(rows, r, version):
    """The Sidekiq `version` row that kiqd row r is compared with: same section, concurrency
    and logging."""
    return next((b for b in rows if b.get("kind") == "sidekiq" and
                 (b.get("sidekiq") or b["system"].split()[1]) == version and
                 b["section"] == r["section"] and b["concurrency"] == r["concurrency"] and
                 log_mode(b) == log_mode(r)), None)


def cpu_cells(r):
    return ["%.1f" % r[k] if r.get(k) is not None else "n/a"
            for k in ("worker_cpu_us_per_job", "redis_cpu_us_per_job")]


def log_cell(r):
    if r.get("log_lines") is None:
        return "n/a"
    return "%d (%d)" % (r["log_lines"], r["log_job_lines"])


def quiet_proof(md, sidekiq_rows):
    """One line per Sidekiq row: how much it logged while it drained. A quiet row with a
    per-job line would mean its logger setting did not take."""
    for r in sidekiq_rows:
        if r.get("log_lines") is None:
            continue
        md.append("- %s c%d, %s: Sidekiq log lines during drain: %d (per-job lines: %d)%s" % (
            r["section"], r["concurrency"], r["system"], r["log_lines"], r["log_job_lines"],
            " **NOT QUIET**" if log_mode(r) == "quiet" and r["log_job_lines"] else ""))
    if any(r.get("log_lines") is not None for r in sidekiq_rows):
        md.append("")


def cmd_report(args):
    rows = [json.loads(l) for l in open(args.results) if l.strip()]
    os.makedirs(args.out, exist_ok=True)
    md = []
    gp_data = {}

    # Throughput: drain and drain through the latency proxy. A kiqd row is compared with each
    # Sidekiq version's row of the same section, concurrency and logging (quiet with quiet,
    # default logging with default logging).
    tp = median_rows([r for r in rows if r["section"] in ("drain", "proxy", "rss")],
                     lambda r: (r["section"], r["concurrency"], r["system"]))
    versions = sidekiq_versions(rows)

    def steady(r):  # jobs/s from the first job taken, so start-up time does not count
        t = r["seconds"] - (r.get("first_take_s") or 0)
        return r["jobs"] / t if t > 0 else None

    md.append("Ratios compare a kiqd row with the Sidekiq row of the same section, concurrency and "
              "logging: quiet (kiqd `logging.level: warn`, Sidekiq's logger at warn) with quiet, "
              "default logging (info: a start and a done line per job, both systems) with "
              "default logging. CPU µs/job: utime+stime from /proc over the drain (first job "
              "taken → queue empty) ÷ jobs; log lines: what the worker wrote from its start "
              "until the queue was empty (per-job lines name a jid).")
    md.append("")
    head = ["condition", "c", "system", "logging", "jobs", "jobs/s"]
    head += ["÷ Sidekiq %s" % v for v in versions]
    head += ["jobs/s after start-up"] + ["÷ %s after start-up" % v for v in versions]
    head += ["worker CPU µs/job", "Redis CPU µs/job", "log lines (per-job)", "peak RSS MB",
             "runs"]
    md.append("| " + " | ".join(head) + " |")
    md.append("|" + "|".join("---" for _ in head) + "|")

    names = {"drain": "loopback", "proxy": "+1 ms per round trip", "rss": "loopback"}
    for r in tp:
        is_sk = r.get("kind") == "sidekiq"
        cells = [names[r["section"]], r["concurrency"], r["system"], log_mode(r), r["jobs"],
                 "%.0f" % r["jobs_per_s"]]
        bases = [None if is_sk else sidekiq_base(tp, r, v) for v in versions]
        cells += ["" if is_sk else fmt_ratio(r["jobs_per_s"], b and b["jobs_per_s"])
                  for b in bases]
        cells += ["%.0f" % (steady(r) or 0)]
        cells += ["" if is_sk else fmt_ratio(steady(r), b and steady(b)) for b in bases]
        cells += cpu_cells(r) + [log_cell(r), "%.1f" % r["peak_rss_mb"], r["runs"]]
        md.append("| " + " | ".join(str(c) for c in cells) + " |")
        if r["section"] in ("drain", "proxy"):
            g = "%s c%d" % ("1 ms" if r["section"] == "proxy" else "loopback", r["concurrency"])
            gp_data.setdefault("throughput", {}).setdefault(g, {})[r["system"]] = r["jobs_per_s"]
        gp_data.setdefault("rss", {}).setdefault("c%d" % r["concurrency"], {})[
            r.get("rss_name", r["system"])] = r["peak_rss_mb"]
    md.append("")
    quiet_proof(md, [r for r in tp if r.get("kind") == "sidekiq"])

    lat = median_rows([r for r in rows if r["section"] == "latency"],
                      lambda r: (r["rate"], r["system"]))
    if lat:
        lversions = sidekiq_versions(lat)
        head = ["paced rate (jobs/s)", "system", "concurrency", "p50 ms", "p99 ms", "max ms"]
        head += ["Sidekiq %s p99 / this p99" % v for v in lversions] + ["runs"]
        md.append("| " + " | ".join(head) + " |")
        md.append("|" + "|".join("---" for _ in head) + "|")
        for r in lat:
            cells = ["%.0f" % r["rate"], r["system"], r["concurrency"], "%.3f" % r["p50_ms"],
                     "%.3f" % r["p99_ms"], "%.3f" % r["max_ms"]]
            for v in lversions:
                base = next((b for b in lat if b["rate"] == r["rate"] and
                             b.get("kind") == "sidekiq" and
                             (b.get("sidekiq") or b["system"].split()[1]) == v), None)
                cells.append("" if r.get("kind") == "sidekiq" or not base else fmt_ratio(
                    base["p99_ms"], r["p99_ms"]))
            cells.append(r["runs"])
            md.append("| " + " | ".join(str(c) for c in cells) + " |")
            gp_data.setdefault("latency", {}).setdefault("%.0f/s p99" % r["rate"], {})[
                r["system"]] = r["p99_ms"]
        md.append("")

    mw = median_rows([r for r in rows if r["section"] == "middleware"],
                     lambda r: (r["concurrency"], r["system"]))
    if mw:
        mversions = sidekiq_versions(mw)
        head = ["middleware row", "c", "jobs", "jobs/s", "vs plain"]
        head += ["÷ Sidekiq %s (plain)" % v for v in mversions]
        head += ["worker CPU µs/job", "Redis CPU µs/job", "log lines (per-job)", "runs"]
        md.append("| " + " | ".join(head) + " |")
        md.append("|" + "|".join("---" for _ in head) + "|")
        for r in mw:
            is_sk = r.get("kind") == "sidekiq"
            plain = next((b for b in mw if b.get("row") == "plain" and
                          b["concurrency"] == r["concurrency"] and
                          b.get("fetch", "basic") == r.get("fetch", "basic")), None)
            cells = [r["system"], r["concurrency"], r["jobs"], "%.0f" % r["jobs_per_s"],
                     "%.0f%%" % (100.0 * r["jobs_per_s"] / plain["jobs_per_s"])
                     if plain and not is_sk else ""]
            for v in mversions:
                b = None if is_sk else sidekiq_base(mw, r, v)
                cells.append("" if is_sk else fmt_ratio(r["jobs_per_s"], b and b["jobs_per_s"]))
            cells += cpu_cells(r) + [log_cell(r), r["runs"]]
            md.append("| " + " | ".join(str(c) for c in cells) + " |")
            gp_data.setdefault("middleware", {}).setdefault("c%d" % r["concurrency"], {})[
                r["system"]] = r["jobs_per_s"]
        md.append("")
        quiet_proof(md, [r for r in mw if r.get("kind") == "sidekiq"])
    if args.notes:
        md.append(open(args.notes).read())
    text = "\n".join(md)
    open(args.markdown, "w").write(text + "\n")
    print(text)

    # Plots: one clustered bar chart per kind (gnuplot, PNG).
    titles = {"throughput": ("Drain of Kiqd::Noop jobs", "jobs/s", True),
              "latency": ("Enqueue -> start latency, p99", "ms", True),
              "rss": ("Peak RSS", "MB", False),
              "middleware": ("Middleware overhead (kiqd), drain", "jobs/s", False)}
    if not shutil.which("gnuplot"):
        print("report: gnuplot not found; no plots", file=sys.stderr)
        return
    for kind, groups in gp_data.items():
        systems = []
        for g in groups.values():
            for sname in g:
                if sname not in systems:
                    systems.append(sname)
        dat = os.path.join(args.out, kind + ".dat")
        with open(dat, "w") as f:
            f.write("group\t" + "\t".join('"%s"' % x for x in systems) + "\n")
            for g, vals in groups.items():
                f.write('"%s"\t' % g + "\t".join(
                    str(vals.get(x, "NaN")) for x in systems) + "\n")
        title, ylabel, logscale = titles[kind]
        gp = os.path.join(args.out, kind + ".gp")
        with open(gp, "w") as f:
            f.write("\n".join([
                "set terminal pngcairo size 1000,520 noenhanced font 'sans,10'",
                "set output '%s'" % os.path.join(args.out, kind + ".png"),
                "set title '%s'" % title, "set ylabel '%s'" % ylabel,
                "set style data histograms", "set style histogram clustered gap 1",
                "set style fill solid 0.85 border -1", "set boxwidth 0.9",
                "set key outside right top vertical", "set grid ytics",
                "set logscale y" if logscale else "set yrange [0:*]",
                "plot for [i=2:%d] '%s' using i:xtic(1) title columnheader(i)" % (
                    len(systems) + 1, dat), ""]))
        subprocess.run(["gnuplot", gp], check=True)


def cmd_table(args):
    rows = [json.loads(l) for l in open(args.results) if l.strip()]
    # Median run (by seconds) per (system, concurrency) when RUNS > 1.
    groups = {}
    for row in rows:
        groups.setdefault((row["system"], row["concurrency"]), []).append(row)
    picked = {}
    for k, runs in groups.items():
        runs.sort(key=lambda r: r["seconds"])
        picked[k] = runs[(len(runs) - 1) // 2]
        picked[k]["runs"] = len(runs)
        picked[k]["spread"] = (
            "%.0f–%.0f" % (min(r["jobs_per_s"] for r in runs), max(r["jobs_per_s"] for r in runs))
            if len(runs) > 1 else "")
    order = []
    for row in rows:
        k = (row["system"], row["concurrency"])
        if k not in order:
            order.append(k)
    order.sort(key=lambda k: (k[1], [r["system"] for r in rows].index(k[0])))
    base = {c: picked[(s, c)]["jobs_per_s"] for (s, c) in picked if s == args.baseline}
    multi = any(p["runs"] > 1 for p in picked.values())
    head = ["system", "concurrency", "jobs", "seconds", "jobs/s", "peak RSS MB", "ratio",
            "first job s", "stop s", "worker CPU s", "redis CPU s", "threads"]
    if multi:
        head += ["runs", "jobs/s range"]
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for k in order:
        p = picked[k]
        b = base.get(p["concurrency"])
        ratio = "%.2f" % (p["jobs_per_s"] / b) if b else "n/a"
        cells = [p["system"], p["concurrency"], p["jobs"], "%.3f" % p["seconds"],
                 "%.0f" % p["jobs_per_s"], "%.1f" % p["peak_rss_mb"], ratio,
                 "%.3f" % p["first_take_s"] if p["first_take_s"] is not None else "n/a",
                 "%.2f" % p["stop_s"],
                 "%.2f" % p["worker_cpu_s"], "%.2f" % p["redis_cpu_s"], p["threads"]]
        if multi:
            cells += [p["runs"], p["spread"]]
        out.append("| " + " | ".join(str(c) for c in cells) + " |")
    print("\n".join(out))


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
