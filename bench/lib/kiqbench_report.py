#!/usr/bin/python3
"""bench/run's reports (standard library only): the markdown tables and gnuplot PNGs of
`kiqbench.py report`, and the plain table of `kiqbench.py table`, from the JSON lines the
measuring subcommands of kiqbench.py append to a results file. Each row is one drain or latency
run; rows of the same label are reduced to their median, and kiqd's rows are set beside the
Sidekiq rows of the same run as ratios."""
import json
import os
import shutil
import subprocess
import sys


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
