#!/usr/bin/python3
"""Helpers for bench/fairness.sh (standard library only).

Subcommands:
  wait    --port P --jobs N [--timeout S]   poll LLEN kiqd-test:ran until it reaches N
  analyze --port P --mode NAME --waits F    read the kiqd-test:ran records, write the small
                                            tenants' waits (seconds, sorted) to F and print one
                                            JSON object (percentiles, throughput, checks)
  table   RESULT.json...                    markdown table of analyze results, in rounds of
                                            four: (a) plain, (b), (c), (d); ratios are to the
                                            round's own (a)
  verdict RESULT.json...                    the targets, from the median over rounds of each
                                            round's ratios
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kiqbench import Redis  # noqa: E402


def percentile(sorted_values, p):
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def cmd_wait(args):
    r = Redis("127.0.0.1", args.port)
    deadline = time.monotonic() + args.timeout
    last, last_change = -1, time.monotonic()
    while True:
        n = r.call("LLEN", "kiqd-test:ran")
        if n >= args.jobs:
            return 0
        if n != last:
            last, last_change = n, time.monotonic()
        if time.monotonic() > deadline or time.monotonic() - last_change > 60:
            print("fairness: only %d of %d jobs ran" % (n, args.jobs), file=sys.stderr)
            return 1
        time.sleep(0.02)


def cmd_analyze(args):
    r = Redis("127.0.0.1", args.port)
    raw = r.call("LRANGE", "kiqd-test:ran", 0, -1)
    recs = [json.loads(x) for x in raw]
    small, greedy, queues = [], [], {}
    for rec in recs:
        tenant = rec["args"][1]
        wait = rec["started"] - rec["enqueued_at"]
        (greedy if tenant == "greedy" else small).append(wait)
        key = "%s/%s" % ("greedy" if tenant == "greedy" else "small", rec["queue"])
        queues[key] = queues.get(key, 0) + 1
    small.sort()
    greedy.sort()
    first = min(rec["started"] for rec in recs)
    last = max(rec["ended"] for rec in recs)
    jids = set(rec["jid"] for rec in recs)
    out = {
        "mode": args.mode,
        "jobs": len(recs),
        "distinct_jids": len(jids),
        "small_jobs": len(small),
        "greedy_jobs": len(greedy),
        "seconds": last - first,
        "jobs_per_s": len(recs) / (last - first),
        "small_p50": percentile(small, 50),
        "small_p99": percentile(small, 99),
        "small_max": small[-1] if small else float("nan"),
        "greedy_p50": percentile(greedy, 50),
        "greedy_p99": percentile(greedy, 99),
        "queues": queues,
        "retry": r.call("ZCARD", "retry"),
        "dead": r.call("ZCARD", "dead"),
    }
    with open(args.waits, "w") as f:
        for i, w in enumerate(small):
            f.write("%.6f %.6f\n" % (w, (i + 1) / len(small)))
    print(json.dumps(out))
    return 0


def ms(v):
    return "%.1f" % (v * 1000.0)


PER_ROUND = 4  # (a) plain, (b) push-time rerouting, (c) server-side rerouting, (d) fair fetch


def rounds(paths):
    rows = [json.load(open(p)) for p in paths]
    return [rows[i:i + PER_ROUND] for i in range(0, len(rows), PER_ROUND)]


def cmd_verdict(args):
    rs = rounds(args.results)
    # (row, label, p99 target, throughput target): the same targets for the two rerouting rows
    # (b, c), stricter ones for fair fetch with a producer that knows nothing of tenants (d).
    for i, what, p99_max, tp_min in ((1, "(b) rerouting at push time", 0.10, 0.90),
                                     (2, "(c) rerouting by kiqd's server side", 0.10, 0.90),
                                     (3, "(d) fair fetch, plain producer", 0.02, 0.95)):
        p99 = sorted(r[i]["small_p99"] / r[0]["small_p99"] for r in rs)
        tp = sorted(r[i]["jobs_per_s"] / r[0]["jobs_per_s"] for r in rs)
        mp99, mtp = statistics.median(p99), statistics.median(tp)
        span = lambda v, f: (" (rounds: %s)" % ", ".join(f % (100 * x) for x in v)) if len(v) > 1 else ""
        print("- %s: small tenants' p99 wait **%.1f %%** of the plain queue's%s — target "
              "at most %g %%: **%s**; throughput **%.0f %%** of the plain queue's%s — target at "
              "least %g %%: **%s**"
              % (what, 100 * mp99, span(p99, "%.1f %%"), 100 * p99_max,
                 "met" if mp99 <= p99_max else "NOT met", 100 * mtp, span(tp, "%.0f %%"),
                 100 * tp_min, "met" if mtp >= tp_min else "NOT met"))
    return 0


def cmd_table(args):
    out_rows = []
    for r in rounds(args.results):
        out_rows += [(row, r[0]) for row in r]
    head = ["run", "jobs", "seconds", "jobs/s", "throughput vs plain", "small p50 wait ms",
            "small p99 wait ms", "small max ms", "p99 vs plain", "greedy p50 wait ms",
            "where jobs ran"]
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r, base in out_rows:
        where = ", ".join("%s %d" % (k, v) for k, v in sorted(r["queues"].items()))
        out.append("| " + " | ".join(str(c) for c in [
            r["mode"], r["jobs"], "%.2f" % r["seconds"], "%.0f" % r["jobs_per_s"],
            "%.0f %%" % (100.0 * r["jobs_per_s"] / base["jobs_per_s"]),
            ms(r["small_p50"]), ms(r["small_p99"]), ms(r["small_max"]),
            "%.1f %%" % (100.0 * r["small_p99"] / base["small_p99"]),
            ms(r["greedy_p50"]), where]) + " |")
    print("\n".join(out))
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("wait")
    w.add_argument("--port", type=int, required=True)
    w.add_argument("--jobs", type=int, required=True)
    w.add_argument("--timeout", type=float, default=600)
    a = sub.add_parser("analyze")
    a.add_argument("--port", type=int, required=True)
    a.add_argument("--mode", required=True)
    a.add_argument("--waits", required=True)
    t = sub.add_parser("table")
    t.add_argument("results", nargs="+")
    v = sub.add_parser("verdict")
    v.add_argument("results", nargs="+")
    args = ap.parse_args()
    return {"wait": cmd_wait, "analyze": cmd_analyze, "table": cmd_table,
            "verdict": cmd_verdict}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
