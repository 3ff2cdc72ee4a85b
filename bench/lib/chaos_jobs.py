"""bench/chaos.sh's job classes for the Python runner (runners/python/kiqd_runner.py).

The same jobs as bench/chaos_job.cpp, which the exec handlers run: each run appends a start and
an end (or fail) line to the ledger $CHAOS_LEDGER, opened with O_APPEND, one os.write per line;
args are [work_ms, mode, ...], mode "fail_once" fails the first attempt (no retry_count yet).
"""

import json
import os
import time

import kiqd_runner

LEDGER = os.environ.get("CHAOS_LEDGER", "")
PROC = os.environ.get("CHAOS_PROC", "?")
_fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)


def _record(job, event):
    retry = job.job.get("retry_count")
    line = json.dumps({"ev": event, "jid": job.jid, "class": job.job.get("class"), "proc": PROC,
                       "pid": os.getpid(), "mono": time.monotonic_ns(),
                       "wall": time.time_ns() // 1000,
                       "retry": -1 if retry is None else retry, "args": job.job.get("args")},
                      separators=(",", ":"))
    os.write(_fd, (line + "\n").encode())


class ChaosJob:
    @staticmethod
    def retry_in(count, exc):  # a short first retry, so that a run drains soon
        return 2

    def perform(self, *args):
        _record(self, "start")
        work_ms = args[0] if args and isinstance(args[0], (int, float)) else 0
        if work_ms > 0:
            time.sleep(work_ms / 1000.0)
        if len(args) > 1 and args[1] == "fail_once" and self.job.get("retry_count") is None:
            _record(self, "fail")
            raise RuntimeError("first attempt fails on purpose")
        _record(self, "end")


for _name in ("Chaos::Plain", "Chaos::Quick", "Chaos::Unique", "Chaos::Limited", "Chaos::Throttled",
              "Chaos::Paused", "Chaos::FailOnce", "Chaos::Cron"):
    kiqd_runner.job(_name)(type(_name.replace("::", ""), (ChaosJob,), {}))
