#!/usr/bin/python3
"""Helpers for bench/backlog.sh (standard library only): a backlog of due jobs in `schedule`
or `retry`, and how long a worker's scheduler takes to empty it.

Subcommands:
  push --set S --jobs N         write RESP for ZADD S of N due Kiqd::Noop payloads to stdout
                                (pipe into `redis-cli --pipe`): `schedule` entries as Sidekiq
                                7.3's client writes a perform_at job (no enqueued_at), `retry`
                                entries as its JobRetry writes a first failure; scores spread
                                over the last N ms, one per job, so score order is push order
  run --port P --set S --jobs N -- CMD ARGS...
                                start the worker, time the backlog from its first move (the
                                first poll comes at a random moment after start, so start-up
                                is left out) until S is empty, then until its queue and
                                working lists are empty (stat:processed, which workers flush
                                at their heartbeat and stop, is checked after); Redis's
                                SLOWLOG (calls of 200 us or more, wall time inside Redis) gives
                                the longest call of the scheduler's script (first key S) and
                                of the others; stop the worker by PID with SIGTERM; print one
                                JSON object; --mover-only: the worker's processors wait on
                                another queue, so the scheduler moves alone; each job must
                                then be in queue:default exactly once
  table --results F             a markdown table of F's rows, each with its rate as a multiple
                                of the Sidekiq row's for the same set (moves/s: Sidekiq's rows
                                may move fewer jobs; its rate is steady)
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kiqbench import Redis, proc_cpu_seconds, resp, stop_child  # noqa: E402

SLOWLOG_US = 200


def cmd_push(args):
    out = sys.stdout.buffer
    now = time.time()
    batch = []
    for i in range(args.jobs):
        score = now - 1.0 - (args.jobs - i) * 0.001
        job = {"retry": True, "queue": args.queue, "class": "Kiqd::Noop", "args": [],
               "jid": os.urandom(12).hex(), "created_at": score}
        if args.set == "retry":
            job.update({"enqueued_at": score, "error_message": "boom",
                        "error_class": "RuntimeError", "failed_at": score, "retry_count": 0})
        batch += [repr(score), json.dumps(job, separators=(",", ":"))]
        if len(batch) >= 2000:
            out.write(resp("ZADD", args.set, *batch))
            batch = []
    if batch:
        out.write(resp("ZADD", args.set, *batch))
    out.flush()


def slow_scripts(r, sorted_set):
    """The script calls SLOWLOG kept (SLOWLOG_US or longer), as two lists of durations in µs:
    the scheduler's (those whose first key is the sorted set: kiqd's batch move, Sidekiq's
    ZPOPBYSCORE) and the others (fetch scripts and the like)."""
    entries = r.call("SLOWLOG", "GET", "-1") or []
    mover, other = [], []
    for e in entries:
        cmd = e[3]
        if not cmd or str(cmd[0]).lower() not in ("evalsha", "eval", "fcall"):
            continue
        (mover if len(cmd) > 3 and cmd[3] == sorted_set else other).append(int(e[2]))
    return mover, other


def cmd_run(args):
    r = Redis("127.0.0.1", args.port)
    total = r.call("ZCARD", args.set)
    if total != args.jobs:
        sys.exit("backlog: expected %d entries in %s, found %d" % (args.jobs, args.set, total))
    r.call("CONFIG", "SET", "slowlog-log-slower-than", str(SLOWLOG_US))
    r.call("CONFIG", "SET", "slowlog-max-len", "100000")
    r.call("SLOWLOG", "RESET")
    r.call("CONFIG", "RESETSTAT")
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    log = open(args.log, "ab")
    child = None

    def on_signal(signo, _frame):
        if child is not None:
            stop_child(child, 30)
        sys.exit(128 + signo)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    t0 = time.monotonic()
    child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=args.cwd,
                             stdin=subprocess.DEVNULL)
    poll = args.poll_ms / 1000.0
    first_move = emptied = ran = None
    redis_cpu0 = worker_cpu0 = None
    while True:
        left = r.call("ZCARD", args.set)
        now = time.monotonic()
        if first_move is None and left < args.jobs:
            first_move = now
            redis_cpu0 = proc_cpu_seconds(args.redis_pid) if args.redis_pid else 0
            worker_cpu0 = proc_cpu_seconds(child.pid)
        if first_move is not None and emptied is None and left == 0:
            emptied = now
            redis_cpu = (proc_cpu_seconds(args.redis_pid) if args.redis_pid else 0) - redis_cpu0
            worker_cpu = proc_cpu_seconds(child.pid) - worker_cpu0
        if emptied is not None and args.mover_only:
            ran = now
            break
        if emptied is not None and r.call("LLEN", "queue:default") == 0:
            # Reliable fetch: a job leaves its working list once its outcome is written.
            working = r.call("SMEMBERS", "kiqd:reliable:working") or []
            if all(r.call("LLEN", w) == 0 for w in working):
                ran = now
                break
        if child.poll() is not None:
            sys.exit("backlog: worker exited with %s (%d left in %s); see %s"
                     % (child.returncode, left, args.set, args.log))
        if now - t0 > args.timeout:
            stop_child(child, 30)
            sys.exit("backlog: timeout after %.0f s with %d left in %s" % (args.timeout, left,
                                                                         args.set))
        time.sleep(poll)
    time.sleep(0.25)  # jobs on their way to threads (a BRPOP reply in flight), as in a drain
    rc = stop_child(child, 60)
    log.close()
    scripts, other_scripts = slow_scripts(r, args.set)
    stats = r.call("INFO", "commandstats")
    evalsha = {}
    for line in stats.splitlines():
        if line.startswith("cmdstat_evalsha:"):
            evalsha = dict(kv.split("=") for kv in line.split(":", 1)[1].split(","))
    processed = int(r.call("GET", "stat:processed") or 0)
    # A small set can go from full to empty between two polls: then it took at most one poll
    # interval, which is what is reported (a smoke's 3,000 jobs do; the real rows take seconds).
    moved_s = max(emptied - first_move, poll)
    result = {
        "system": args.label, "set": args.set, "jobs": args.jobs,
        "empty_s": round(moved_s, 4), "moves_per_s": round(args.jobs / moved_s, 1),
        "first_move_s": round(first_move - t0, 3), "all_taken_s": round(ran - first_move, 4),
        "worker_cpu_us_per_move": round(1e6 * worker_cpu / args.jobs, 2),
        "redis_cpu_us_per_move": round(1e6 * redis_cpu / args.jobs, 2),
        "script_calls": int(evalsha.get("calls", 0)),
        "script_us_per_call": float(evalsha.get("usec_per_call", 0)),
        "slow_script_calls": len(scripts), "slowlog_threshold_us": SLOWLOG_US,
        "max_script_us": max(scripts) if scripts else None,
        "script_calls_over_5ms": sum(1 for us in scripts if us > 5000),
        "max_other_script_us": max(other_scripts) if other_scripts else None,
        "other_script_calls_over_5ms": sum(1 for us in other_scripts if us > 5000),
        "exit_code": rc, "stat_processed": processed,
        "dead": r.call("ZCARD", "dead"), "left": r.call("ZCARD", args.set),
    }
    problems = []
    if rc != 0:
        problems.append("exit code %s (expected 0 after SIGTERM)" % rc)
    if args.mover_only:
        # Nothing runs the jobs: each must be in its queue exactly once.
        queued = r.call("LLEN", "queue:default")
        jids = set(json.loads(p)["jid"] for p in r.call("LRANGE", "queue:default", "0", "-1"))
        result["queued"] = queued
        if queued != args.jobs or len(jids) != args.jobs:
            problems.append("queue:default holds %d jobs, %d distinct, expected %d"
                            % (queued, len(jids), args.jobs))
    elif processed != args.jobs:
        problems.append("stat:processed=%d, expected %d" % (processed, args.jobs))
    if result["dead"] or result["left"]:
        problems.append("dead=%d left=%d" % (result["dead"], result["left"]))
    result["problems"] = problems
    result.update(json.loads(args.extra))
    print(json.dumps(result))
    if problems:
        print("backlog: %s: %s (log: %s)" % (args.label, "; ".join(problems), args.log),
              file=sys.stderr)
        sys.exit(3)


def cmd_table(args):
    rows = [json.loads(l) for l in open(args.results) if l.strip()]
    def group(r):  # rows whose scheduler moved alone compare with each other
        mover = r.get("fetch") == "mover" or r.get("kind") == "sidekiq-mover"
        return (r["set"], mover)

    base = {}
    for r in rows:
        if r.get("kind") in ("sidekiq", "sidekiq-mover"):
            base.setdefault(group(r), r["moves_per_s"])
    print("| set | system | jobs | emptied in | moves/s | x Sidekiq | all taken in "
          "| longest script call | script calls > 5 ms |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        g = group(r)
        ratio = "%.1fx" % (r["moves_per_s"] / base[g]) if g in base else "-"
        longest = ("%.2f ms" % (r["max_script_us"] / 1000) if r["max_script_us"] is not None
                   else "< %.1f ms" % (r["slowlog_threshold_us"] / 1000))
        print("| %s | %s | %d | %.2f s | %.0f | %s | %.2f s | %s | %d |" % (
            r["set"], r["system"], r["jobs"], r["empty_s"], r["moves_per_s"], ratio,
            r["all_taken_s"], longest, r["script_calls_over_5ms"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("push")
    p.add_argument("--set", choices=["schedule", "retry"], required=True)
    p.add_argument("--jobs", type=int, required=True)
    p.add_argument("--queue", default="default")
    r = sub.add_parser("run")
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--set", choices=["schedule", "retry"], required=True)
    r.add_argument("--jobs", type=int, required=True)
    r.add_argument("--label", required=True)
    r.add_argument("--log", required=True)
    r.add_argument("--cwd", default=None)
    r.add_argument("--poll-ms", type=float, default=10)
    r.add_argument("--timeout", type=float, default=3600)
    r.add_argument("--redis-pid", type=int, default=0)
    r.add_argument("--extra", default="{}", help="JSON merged into the result")
    r.add_argument("--mover-only", action="store_true",
                   help="the worker runs no jobs of queue:default (its processors wait on "
                        "another queue): stop once S is empty, check every job is queued once")
    r.add_argument("command", nargs=argparse.REMAINDER)
    t = sub.add_parser("table")
    t.add_argument("--results", required=True)
    args = ap.parse_args()
    {"push": cmd_push, "run": cmd_run, "table": cmd_table}[args.cmd](args)


if __name__ == "__main__":
    main()
