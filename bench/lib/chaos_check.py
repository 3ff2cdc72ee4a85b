"""The checks of bench/chaos.sh, from its files alone: the ledgers (ledger-*.jsonl: every run's
start and end or fail, written by the jobs themselves) and events.jsonl (every push, fault,
pause and resume, written by the harness). Times are wall-clock microseconds of one machine.

A *run* is a start with its end (ok), its fail, or neither (cut: its process, runner child or
command was killed). Per jid, runs in start order; a run after a run that ended ok is a
*duplicate*, and each is explained by a fault in one of the documented windows or counted as
unexplained:
  kill -9 before the acknowledgement  its process was killed within ACK_WINDOW after it ended
  stall past liveness_ttl             its process was stopped longer than liveness_ttl, and the
                                      run had started before the stop (or ended just before it)
  Redis unreachable past liveness_ttl the same for an outage of its process's connections
Two runs of one jid that overlap in time are explained only by the last two.

A Chaos::Unique push that never runs is not lost when kiqd dropped it as a duplicate of its
identity: with on_conflict reschedule, one copy of an identity waits for the running one and
further copies are dropped and logged, as sidekiq-unique-jobs does. Each such drop must be
followed by a run of the same identity that ended ok (the copy that waited), or it counts as
lost.
"""

import json
import os
import re
import time
from collections import defaultdict

ACK_WINDOW_US = 5_000_000   # an acknowledgement goes out within milliseconds of the end: well under
HEARTBEAT_US = 10_000_000   # stats flushed at least this often (kill -9 loses what is unflushed)


def read_jsonl(path):
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass  # a line cut by a kill: ignored, its run shows as cut
    return out


def ledger_events(work):
    events = []
    for name in sorted(os.listdir(work)):
        if name.startswith("ledger-") and name.endswith(".jsonl"):
            events += read_jsonl(os.path.join(work, name))
    return events


def all_ran(work, dead=()):
    """Whether every confirmed push has a run that ended ok, or is in the dead set `dead` (the
    drain's condition)."""
    done = {e["jid"] for e in ledger_events(work) if e.get("ev") == "end"} | set(dead) | \
        unique_drops(work)
    pushed = [e for e in read_jsonl(os.path.join(work, "events.jsonl"))
              if e.get("ev") == "push" and e.get("confirmed")]
    return all(p["jid"] in done for p in pushed)


def scan(conn, pattern):
    keys, cursor = [], "0"
    while True:
        cursor, batch = conn.call("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
        keys += batch
        if cursor == "0":
            return keys


def leftover_locks(conn):
    """Run locks, wait locks, held-lock entries, live concurrency slots and parked jobs."""
    now_ms = int(time.time() * 1000)
    left = {"exec_locks": scan(conn, "uniquejobs:*:EXEC"),
            "wait_locks": scan(conn, "uniquejobs:*:WAIT"),
            "held": [k for k in (conn.call("HKEYS", "kiqd:unique:held") or [])
                     if k != "kiqd:marker"],
            "live_slots": [], "parked": []}
    for key in scan(conn, "kiqd:concurrency:*:slots"):
        live = conn.call("ZRANGEBYSCORE", key, now_ms, "+inf")
        left["live_slots"] += ["%s %s" % (key, m) for m in live]
    for key in scan(conn, "kiqd:concurrency:*:waiting"):
        if conn.call("LLEN", key):
            left["parked"].append(key)
    return left


DROP_LINE = re.compile(r" jid=([0-9a-f]+) duplicate dropped")


def unique_drops(work):
    """Jids kiqd logged as dropped by a unique lock's on_conflict (another copy of the identity
    was waiting)."""
    drops = set()
    for name in os.listdir(work):
        if name.endswith(".out"):
            with open(os.path.join(work, name), errors="replace") as f:
                for line in f:
                    m = DROP_LINE.search(line)
                    if m:
                        drops.add(m.group(1))
    return drops


def redis_failures(work):
    """Jobs kiqd logged as failed with a Redis error (before their handler ran)."""
    n = 0
    for name in os.listdir(work):
        if name.endswith(".out"):
            with open(os.path.join(work, name), errors="replace") as f:
                n += sum(1 for line in f if " fail: " in line and "kiqd::redis::" in line)
    return n


def build_runs(events):
    """Pairs each start with its end or fail (same jid, process, pid and attempt)."""
    runs, open_runs = [], {}
    for e in sorted(events, key=lambda e: (e["wall"], 0 if e["ev"] == "start" else 1)):
        key = (e["jid"], e["proc"], e["pid"], e.get("retry"))
        if e["ev"] == "start":
            run = {"jid": e["jid"], "cls": e["class"], "proc": e["proc"], "pid": e["pid"],
                   "start": e["wall"], "end": None, "outcome": "cut", "args": e.get("args")}
            runs.append(run)
            open_runs.setdefault(key, []).append(run)
        elif open_runs.get(key):
            run = open_runs[key].pop(0)
            run["end"] = e["wall"]
            run["outcome"] = "ok" if e["ev"] == "end" else "fail"
    return runs


def cut_by(run, faults):
    """The fault that ended a run without an end: (kind, time) or None."""
    best = None
    for f in faults:
        t = None
        if f["kind"] == "kill9" and f["target"] == run["proc"]:
            t = f["killed"]
        elif f["kind"] == "deploy" and f["target"] == run["proc"]:
            t = f["stopped"]
        elif f["kind"] == "runner_kill9" and f["pid"] == run["pid"] and f["target"] == run["proc"]:
            # The signal went out after the fault's start (the runner's children are listed
            # first): a run that started in between was killed by it too.
            t = f.get("killed", f["end"])
        if t is not None and t >= run["start"] and (best is None or t < best[1]):
            best = (f["kind"], t)
    return best


def away_window(run, faults, ttl_us):
    """A stall or outage of the run's process, long enough for its liveness key to lapse, that
    the run started before (or ended shortly before): the documented 'could not reach Redis for
    longer than liveness_ttl' window."""
    for f in faults:
        if f["target"] != run["proc"] or f["kind"] not in ("stall", "outage"):
            continue
        # The key is refreshed every third of the TTL, so a gap of two thirds may lapse it.
        if f["seconds"] * 1e6 < ttl_us * 2 / 3:
            continue
        ended = run["end"] if run["end"] is not None else run["start"]
        if run["start"] <= f["end"] and ended >= f["start"] - ACK_WINDOW_US:
            return "stall past liveness_ttl" if f["kind"] == "stall" \
                else "Redis unreachable past liveness_ttl"
    return None


def explain_duplicate(first, second, faults, ttl_us):
    # The later run's process had taken the job before it went away (it was running, in its
    # middleware chain) and started the handler when it came back: the same window.
    for f in faults:
        if f["target"] == second["proc"] and f["kind"] in ("stall", "outage") and \
                f["seconds"] * 1e6 >= ttl_us * 2 / 3 and \
                f["start"] <= second["start"] <= f["end"] + ACK_WINDOW_US:
            return "stall past liveness_ttl" if f["kind"] == "stall" \
                else "Redis unreachable past liveness_ttl"
    for f in faults:
        if f["kind"] == "kill9" and f["target"] == first["proc"] and \
                0 <= f["killed"] - first["end"] <= ACK_WINDOW_US:
            return "kill -9 before the acknowledgement"
    return away_window(first, faults, ttl_us)


def max_overlap(intervals):
    points = sorted([(s, 1) for s, e in intervals] + [(e, -1) for s, e in intervals],
                    key=lambda p: (p[0], p[1]))
    now = peak = 0
    for _, d in points:
        now += d
        peak = max(peak, now)
    return peak


def check(work, ttl, leftovers, stats, sets, drain_ok, limit, unique_class):
    ttl_us = ttl * 1_000_000
    events = read_jsonl(os.path.join(work, "events.jsonl"))
    faults = [e for e in events if e.get("ev") == "fault"]
    pushes = [e for e in events if e.get("ev") == "push"]
    begin = next(e["wall"] for e in events if e.get("ev") == "begin")
    load_end = next((e["wall"] for e in events if e.get("ev") == "load_end"), None)
    runs = build_runs(ledger_events(work))
    for r in runs:
        if r["outcome"] == "cut":
            r["cut_by"] = cut_by(r, faults)
    by_jid = defaultdict(list)
    for r in runs:
        by_jid[r["jid"]].append(r)
    for rs in by_jid.values():
        rs.sort(key=lambda r: r["start"])

    def end_of(r):
        if r["end"] is not None:
            return r["end"]
        return r["cut_by"][1] if r.get("cut_by") else r["start"]

    # Lost: a confirmed push with no run that ended ok, and not in the retry or dead set.
    in_sets = {name: {json.loads(m).get("jid") for m in members}
               for name, members in sets.items()}
    ok_jids = {r["jid"] for r in runs if r["outcome"] == "ok"}
    confirmed = [p for p in pushes if p["confirmed"]]
    # Dropped as a duplicate of its unique identity: explained when a run of that identity,
    # started after the push, ended ok (the copy that waited).
    drops = unique_drops(work)
    identity_ok = defaultdict(list)
    for r in runs:
        if r["cls"] == unique_class and r["outcome"] == "ok" and r["args"] and len(r["args"]) > 2:
            identity_ok[r["args"][2]].append(r["start"])
    dropped = [p["jid"] for p in confirmed if p["jid"] not in ok_jids and p["jid"] in drops and
               len(p.get("args") or []) > 2 and
               any(s >= p["wall"] for s in identity_ok[p["args"][2]])]
    lost = [p["jid"] for p in confirmed if p["jid"] not in ok_jids
            and p["jid"] not in in_sets["retry"] and p["jid"] not in in_sets["dead"]
            and p["jid"] not in dropped]
    unconfirmed = [p for p in pushes if not p["confirmed"]]

    # Duplicates and reruns.
    causes, unexplained, reruns = defaultdict(int), [], defaultdict(int)
    for jid, rs in by_jid.items():
        for first, second in zip(rs, rs[1:]):
            overlap = second["start"] < end_of(first)
            if first["outcome"] == "ok":
                cause = explain_duplicate(first, second, faults, ttl_us)
                if overlap:
                    cause = away_window(first, faults, ttl_us)
                if cause:
                    causes[cause] += 1
                else:
                    unexplained.append({"jid": jid, "first": first, "second": second})
            elif first["outcome"] == "cut":
                if overlap and not away_window(first, faults, ttl_us):
                    unexplained.append({"jid": jid, "first": first, "second": second,
                                        "why": "ran again while the cut run may still run"})
                reruns[first["cut_by"][0] if first.get("cut_by") else "unknown"] += 1
            else:
                reruns["failed, retried"] += 1
    vanished = [r for r in runs if r["outcome"] == "cut" and not r.get("cut_by")]

    # One unique identity never runs twice at once.
    unique_overlaps = []
    by_identity = defaultdict(list)
    for r in runs:
        if r["cls"] == unique_class and r["args"] and len(r["args"]) > 2:
            by_identity[r["args"][2]].append((r["start"], end_of(r), r["jid"]))
    for ident, spans in by_identity.items():
        spans.sort()
        for (s1, e1, j1), (s2, e2, j2) in zip(spans, spans[1:]):
            if s2 < e1 and j1 != j2:
                unique_overlaps.append({"identity": ident, "jids": [j1, j2]})

    limited = [(r["start"], end_of(r)) for r in runs if r["cls"] == "Chaos::Limited"]
    max_limited = max_overlap(limited)

    # Cron: each tick once (one jid per tick time), none missing while the load ran.
    # The argument is the enqueue time (sidekiq-cron's date_as_argument): a poll 1-3 s after
    # its tick, so the tick is the 10 s boundary before it.
    ticks = defaultdict(set)
    for r in runs:
        if r["cls"] == "Chaos::Cron" and r["args"]:
            ticks[int(float(r["args"][-1])) // 10 * 10].add(r["jid"])
    twice = {t: sorted(j) for t, j in ticks.items() if len(j) > 1}
    first_tick = (begin // 1_000_000 // 10 + 1) * 10
    last_tick = ((load_end or begin) // 1_000_000 - 5) // 10 * 10
    expected = set(range(first_tick, last_tick + 1, 10))
    missing = sorted(expected - set(ticks))
    # A tick whose polls all came while Redis refused writes cannot be enqueued, and the poll
    # after the refusals enqueues only the latest run it missed (sidekiq-cron's rule): with
    # ticks every 10 s, a refusal longer than that skips the ticks inside it. Counted apart.
    refusals = [(f["start"] / 1e6, f["end"] / 1e6) for f in faults if f["kind"] == "refuse"]
    skipped = [t for t in missing if any(s - 5 <= t <= e for s, e in refusals)]
    missing = [t for t in missing if t not in skipped]

    # Sidekiq::Stats against the ledger; a kill -9 loses the counts its process had not
    # flushed yet (at most one heartbeat's worth).
    crashed = [r for r in runs if r.get("cut_by") and r["cut_by"][0] == "runner_kill9"]
    finished = [r for r in runs if r["outcome"] in ("ok", "fail")]
    # kiqd's stats count runs of the handler: a dropped duplicate is not one.
    ledger_processed = len(finished) + len(crashed)
    ledger_failed = sum(1 for r in finished if r["outcome"] == "fail") + len(crashed)
    unflushed = {"processed": 0, "failed": 0}
    for f in faults:
        if f["kind"] != "kill9":
            continue
        for r in finished + crashed:
            t = end_of(r)
            if r["proc"] == f["target"] and f["killed"] - HEARTBEAT_US <= t <= f["killed"]:
                unflushed["processed"] += 1
                if r["outcome"] != "ok":
                    unflushed["failed"] += 1
    # Jobs that failed before their handler ran because their process lost Redis (a cut or an
    # outage in the middle of a middleware's call) count in Sidekiq's stats, not in the ledger;
    # kiqd logs each ("fail: … kiqd::redis::…").
    before_handler = redis_failures(work)
    stats_ok = all(ledger - unflushed[k] <= stats[k] <= ledger + before_handler for k, ledger in
                   (("processed", ledger_processed), ("failed", ledger_failed)))

    left = {k: v for k, v in leftovers.items() if v}
    fault_counts = defaultdict(int)
    for f in faults:
        fault_counts[f["kind"]] += 1
    classes = defaultdict(int)
    for p in pushes:
        classes[p["cls"]] += 1
    report = {
        "seed": next(e.get("seed") for e in events if e.get("ev") == "begin"),
        "pushed": len(pushes), "pushed_by_class": dict(classes),
        "unconfirmed_pushes": len(unconfirmed),
        "unconfirmed_that_ran": sum(1 for p in unconfirmed if p["jid"] in ok_jids),
        "runs": len(runs), "cron_runs": sum(1 for r in runs if r["cls"] == "Chaos::Cron"),
        "faults": dict(fault_counts), "fault_total": len(faults),
        "lost": lost, "in_retry": len(in_sets["retry"]), "in_dead": len(in_sets["dead"]),
        "unique_dropped": len(dropped),
        "duplicates_by_cause": dict(causes), "unexplained_duplicates": unexplained[:20],
        "unexplained_count": len(unexplained),
        "reruns_after_interruption": dict(reruns), "vanished_runs": vanished[:20],
        "unique_overlaps": unique_overlaps, "max_concurrency_limited": max_limited,
        "concurrency_limit": limit,
        "cron": {"ticks_fired": len(ticks), "expected": len(expected), "missing": missing,
                 "skipped_while_refused": skipped, "twice": twice},
        "leftover_locks": left,
        "stats": {"redis": stats, "ledger_processed": ledger_processed,
                  "ledger_failed": ledger_failed, "unflushed_allowance": unflushed,
                  "failed_before_handler": before_handler,
                  "agree": stats_ok},
        "drained": drain_ok,
    }
    report["ok"] = (drain_ok and not lost and not unexplained and not vanished and
                    not unique_overlaps and max_limited <= limit and not twice and
                    not missing and not left and stats_ok)
    return report


def print_report(r):
    p = print
    p("chaos: seed %s: %d jobs pushed (%s), %d unconfirmed (Redis died or refused writes mid-push; %d of them ran)"
      % (r["seed"], r["pushed"], ", ".join("%s %d" % kv for kv in sorted(r["pushed_by_class"].items())),
         r["unconfirmed_pushes"], r["unconfirmed_that_ran"]))
    p("chaos: %d runs (%d cron); %d faults: %s" % (
        r["runs"], r["cron_runs"], r["fault_total"],
        ", ".join("%s %d" % kv for kv in sorted(r["faults"].items()))))
    p("chaos: lost %d%s; in retry %d, dead %d; dropped as a waiting unique identity's duplicate %d"
      % (len(r["lost"]), (": %s" % r["lost"][:10]) if r["lost"] else "", r["in_retry"],
         r["in_dead"], r["unique_dropped"]))
    dup = r["duplicates_by_cause"]
    p("chaos: duplicates %d (%s), unexplained %d" % (
        sum(dup.values()), ", ".join("%s: %d" % kv for kv in sorted(dup.items())) or "none",
        r["unexplained_count"]))
    for u in r["unexplained_duplicates"][:5]:
        p("chaos:   unexplained: %s" % json.dumps(u))
    p("chaos: reruns after an interruption: %s" % (
        ", ".join("%s %d" % kv for kv in sorted(r["reruns_after_interruption"].items())) or "none"))
    if r["vanished_runs"]:
        p("chaos: runs that stopped with no fault to explain it: %s" % r["vanished_runs"][:5])
    p("chaos: unique identities overlapping: %d; Chaos::Limited max concurrency %d (limit %d)"
      % (len(r["unique_overlaps"]), r["max_concurrency_limited"], r["concurrency_limit"]))
    c = r["cron"]
    p("chaos: cron ticks fired %d, expected %d, missing %s, skipped while Redis refused writes "
      "%d, twice %s" % (c["ticks_fired"], c["expected"], c["missing"] or "none",
                        len(c["skipped_while_refused"]), c["twice"] or "none"))
    p("chaos: locks/slots left after reaping: %s" % (r["leftover_locks"] or "none"))
    s = r["stats"]
    p("chaos: stats processed %d / ledger %d, failed %d / ledger %d (kill -9 allowance %s, "
      "failed before the handler on a Redis error %d): %s"
      % (s["redis"]["processed"], s["ledger_processed"], s["redis"]["failed"],
         s["ledger_failed"], s["unflushed_allowance"], s["failed_before_handler"],
         "agree" if s["agree"] else "DISAGREE"))
    p("chaos: %s" % ("PASS" if r["ok"] else "FAIL"))
