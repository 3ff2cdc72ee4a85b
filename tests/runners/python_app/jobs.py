"""Python jobs for tests/integration/runner_test.cpp: each records what it did in a file under
$APP_OUT (one line per event), so the test reads the results where the jobs wrote them."""
import json
import os
import time

import kiqd_runner


def record(kind, *values):
    with open(os.path.join(os.environ["APP_OUT"], kind), "a") as f:
        f.write(json.dumps(list(values)) + "\n")


@kiqd_runner.job
class PlainJob:
    def perform(self, a, b):
        print("python plain job %s %s" % (a, b))
        record("done", "PlainJob", self.jid, a, b, os.getpid())


@kiqd_runner.job("Py::FailingJob")
class FailingJob:
    @staticmethod
    def retry_in(count, exc):
        return 1000 * (count + 1)

    def perform(self, x):
        self.check_input(x)

    def check_input(self, x):
        raise ValueError("bad input %s" % x)


@kiqd_runner.job
class ExhaustedJob:
    @staticmethod
    def retries_exhausted(job, exc):
        record("exhausted", job["jid"], job["error_class"], str(exc))

    def perform(self):
        raise OSError("disk gone")


@kiqd_runner.job
class TroubleJob:
    def perform(self, mode, key=None):
        record("started", mode, key, os.getpid())
        if mode == "exit":
            os._exit(3)
        elif mode == "hang":
            time.sleep(3600)
        elif mode == "slow":
            time.sleep(3)
            record("finished", mode, key, os.getpid())
