"""Writes Redis protocol to stdout for `redis-cli --pipe`: SADD queues default and LPUSHes of
Sidekiq-6.4.1-shaped payloads (unique jids) of class CLASS to queue:default.
Usage: /usr/bin/python3 bench/lib/push_jobs.py CLASS N | redis-cli ... --pipe
         N jobs with args [i, "x"]; a CLASS of "aj:JobClass": N ActiveJob jobs as Rails 6.1's
         Sidekiq adapter pushes them (perform_later), with arguments [1 + i % 100] (an account id
         of the Rails app's benchmark, which seeds 100)
       /usr/bin/python3 bench/lib/push_jobs.py CLASS GREEDY TENANTS PER_TENANT | redis-cli ...
         GREEDY jobs of tenant "greedy", then PER_TENANT rounds of one job for each of TENANTS
         tenants "t0".."t<TENANTS-1>"; the tenant is args[0] (bench/fair_fetch_cost.sh)"""
import json, os, sys, time, uuid

cls = sys.argv[1]
out = sys.stdout.buffer


def cmd(*parts):
    out.write(b"*%d\r\n" % len(parts))
    for p in parts:
        p = p.encode()
        out.write(b"$%d\r\n%s\r\n" % (len(p), p))


now = time.time()


def push(args):
    job = {"retry": True, "queue": "default", "class": cls, "args": args,
           "jid": os.urandom(12).hex(), "created_at": now, "enqueued_at": now}
    if cls.startswith("aj:"):
        job["class"] = "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"
        job["wrapped"] = cls[3:]
        job["args"] = [{"job_class": cls[3:], "job_id": str(uuid.uuid4()), "provider_job_id": None,
                        "queue_name": "default", "priority": None, "arguments": [1 + args[0] % 100],
                        "executions": 0, "exception_executions": {}, "locale": "en",
                        "timezone": "UTC", "enqueued_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))}]
    cmd("LPUSH", "queue:default", json.dumps(job, separators=(",", ":")))


cmd("SADD", "queues", "default")
if len(sys.argv) == 3:
    for i in range(int(sys.argv[2])):
        push([i, "x"])
else:
    greedy, tenants, per = map(int, sys.argv[2:5])
    for i in range(greedy):
        push(["greedy", i])
    for j in range(per):
        for t in range(tenants):
            push(["t%d" % t, j])
