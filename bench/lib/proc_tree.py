#!/usr/bin/python3
"""Sums a figure over a tree of processes, from /proc (used by bench/runners.sh).

    proc_tree.py pss [--children|--self] PID...   PSS in MB (smaps_rollup)
    proc_tree.py cpu [--children|--self] PID...   CPU seconds so far (utime+stime)
    proc_tree.py waits [--children|--self] PID...  times a thread has slept and been woken so
                                                   far (voluntary context switches, summed
                                                   over every thread)

The tree is the given pids and all their descendants; --children leaves the given pids out
(a runner pool without kiqd itself), --self takes the given pids alone.
"""
import os
import sys


def main(argv):
    what, args = argv[0], argv[1:]
    mode = args[0] if args[:1] in (["--children"], ["--self"]) else ""
    roots = set(int(p) for p in args[bool(mode):])
    ticks, children = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            f = open("/proc/%s/stat" % d).read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks[int(d)] = int(f[11]) + int(f[12])
        children.setdefault(int(f[1]), []).append(int(d))
    todo, seen = list(roots), set()
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            todo += children.get(p, [])
    if mode == "--self":
        seen = roots
    elif mode == "--children":
        seen -= roots
    if what == "cpu":
        print(sum(ticks.get(p, 0) for p in seen) / os.sysconf("SC_CLK_TCK"))
        return
    if what == "waits":
        print(sum(voluntary_switches(p) for p in seen))
        return
    kb = 0
    for p in seen:
        try:
            for line in open("/proc/%d/smaps_rollup" % p):
                if line.startswith("Pss:"):
                    kb += int(line.split()[1])
        except OSError:
            pass
    print(round(kb / 1024))


def voluntary_switches(pid):
    # Per thread: a process's own status counts only its main thread.
    total = 0
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return 0
    for tid in tids:
        try:
            for line in open("/proc/%d/task/%s/status" % (pid, tid)):
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


if __name__ == "__main__":
    main(sys.argv[1:])
