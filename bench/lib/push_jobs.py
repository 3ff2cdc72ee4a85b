"""Writes Redis protocol to stdout for `redis-cli --pipe`: SADD queues default and N LPUSHes of
Sidekiq-6.4.1-shaped payloads (unique jids) of class CLASS to queue:default.
Usage: /usr/bin/python3 bench/lib/push_jobs.py CLASS N | redis-cli ... --pipe"""
import json, os, sys, time

cls, n = sys.argv[1], int(sys.argv[2])
out = sys.stdout.buffer


def cmd(*parts):
    out.write(b"*%d\r\n" % len(parts))
    for p in parts:
        p = p.encode()
        out.write(b"$%d\r\n%s\r\n" % (len(p), p))


now = time.time()
cmd("SADD", "queues", "default")
for i in range(n):
    job = {"retry": True, "queue": "default", "class": cls, "args": [i, "x"],
           "jid": os.urandom(12).hex(), "created_at": now, "enqueued_at": now}
    cmd("LPUSH", "queue:default", json.dumps(job, separators=(",", ":")))
