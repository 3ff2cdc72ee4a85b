"""Python jobs for tests/runners/runner_protocol_test.rb: each records what it did in a file under
$APP_OUT (one JSON line per event), and GateJob waits at a gate: a FIFO under $APP_GATES that the
test opens and closes to let one job on."""
import json
import os
import threading
import time

import kiqd_runner

_lock = threading.Lock()


def record(kind, *values):
    with _lock, open(os.path.join(os.environ["APP_OUT"], kind), "a") as f:
        f.write(json.dumps(list(values)) + "\n")


@kiqd_runner.job
class GateJob:
    def perform(self, key):
        record("started", key, self.jid, threading.get_ident())
        with open(os.path.join(os.environ["APP_GATES"], key)) as gate:
            gate.read()
        record("finished", key, self.jid)


@kiqd_runner.job
class SleepJob:
    def perform(self, key):
        record("started", key, self.jid, threading.get_ident())
        time.sleep(60)


class ModeError(Exception):
    pass


@kiqd_runner.job
class FailJob:
    @staticmethod
    def retry_in(count, exc):
        return {"kill": "kill", "discard": "discard"}.get(str(exc), 100 * (count + 1))

    def perform(self, mode):
        self.check(mode)

    def check(self, mode):
        raise ModeError(mode)


@kiqd_runner.job
class ExhaustedJob:
    @staticmethod
    def retries_exhausted(job, exc):
        record("exhausted", job["jid"], str(exc))

    def perform(self):
        pass


@kiqd_runner.job
class StopJob:
    """Runs until kiqd says it is stopping (quiet), then ends early."""

    def perform(self, key):
        record("started", key, self.jid, threading.get_ident())
        while not kiqd_runner.stopping():
            time.sleep(0.01)
        record("stopped", key, self.jid)
