"""Example Python jobs for kiqd's Python runner (see kiqd.yml next to this file).

Enqueue from Ruby as usual (Sidekiq::Client.push("class" => "HardWorker", "args" => ["Ada", 3]))
or with `kiqd enqueue HardWorker '"Ada"' 3`.
"""
import time

import kiqd_runner


@kiqd_runner.job
class HardWorker:
    def perform(self, name, count):
        print("hello %s from job %s" % (name, self.jid))  # lands in kiqd's log with class and jid
        time.sleep(0.01 * count)


@kiqd_runner.job("Billing::Invoice")
class Invoice:
    @staticmethod
    def retry_in(count, exc):
        return 30 * (count + 1)  # seconds until the retry numbered `count` (0 = the first)

    @staticmethod
    def retries_exhausted(job, exc):
        print("giving up on invoice %s: %s" % (job["args"][0], exc))

    def perform(self, invoice_id):
        if invoice_id < 0:
            raise ValueError("no invoice %d" % invoice_id)
