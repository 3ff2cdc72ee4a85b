#!/usr/bin/python3
"""bench/chaos.sh's harness: a fleet of three kiqd processes on one private Redis, a steady mix
of jobs, and faults on a seeded schedule; then a drain and the checks of chaos_check.py.

The fleet (every process on queue `chaos`, each through its own bench/latency_proxy):
  A  batched reliable fetch (batch_size 50), exec handlers (bench/chaos_job)
  B  basic fetch, exec handlers
  C  reliable fetch (batch_size 10), a Python runner pool (runners/python/kiqd_runner.py with
     bench/lib/chaos_jobs.py: 2 processes of 2 threads)
Redis: AOF with appendfsync always, so a kill -9 of Redis loses no acknowledged write.

The jobs (classes Chaos::*): Plain; Quick (50-200 ms: the jobs whose acknowledgements a batched
fetch used to hold until its next refill); Unique (until_and_while_executing over UNIQUE_IDS
identities, on_conflict: reschedule, so no copy is dropped); Limited (concurrency_limit 3);
Throttled (2 starts per 2 s); Paused (its worker is paused and resumed every PAUSE_EVERY s);
FailOnce (fails its first attempt); Cron (a cron entry every 10 s, its time as the argument).
Each run appends start and end (or fail) to the ledger of its process (ledger-<A|B|C>.jsonl).

The faults, one at a time, chosen and timed by the seeded RNG:
  kill9        kill -9 of A or C, restarted 1-3 s later
  runner_kill9 kill -9 of one of C's runner children
  deploy       SIGTERM of A, B or C, restarted once it has exited
  stall        SIGSTOP of A, B or C for liveness_ttl + 2..6 s, then SIGCONT
  redis_kill9  kill -9 of Redis, restarted from its AOF 0.5-2 s later
  latency      200 ms added to every round trip of A, B or C for 3-8 s
  cut          every connection of A or C cut at once
  outage       A's or C's Redis unreachable (connections cut and refused) for 1-10 s
  refuse       Redis refuses writes for 3-12 s (liveness_ttl is 5): out of memory (maxmemory
               with noeviction, filled by another client) or MISCONF (a save that fails: its
               dir set to /proc, stop-writes-on-bgsave-error), for the whole fleet at once
B (basic fetch) gets only the faults basic fetch survives by design: a kill -9 or a cut
connection loses what BRPOP had popped, as Sidekiq's BasicFetch does (docs/reliability.md).

Environment: SEED, DURATION (s of load and faults), RATE (jobs/s), FAULT_EVERY (s between
faults, on average), BUILD (where kiqd, latency_proxy and chaos_job are), WORK (a directory
to keep everything in; default: a temporary one, removed unless the run fails or KEEP=1).
"""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos_check  # noqa: E402
from kiqbench import Redis, cmd_freeport  # noqa: E402,F401

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
LIVENESS_TTL = 5
ORPHAN_CHECK = 5
REAPER_INTERVAL = 10
CHECK_INTERVAL = 5
SLOT_TTL = 30
CONCURRENCY = {"A": 4, "B": 3, "C": 4}
UNIQUE_IDS = 4
PAUSE_EVERY = 20


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log(msg):
    print("chaos: [%s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


class Events:
    """An append-only JSON-lines file, one write per line (faults, pushes)."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.lock = threading.Lock()

    def add(self, **fields):
        fields.setdefault("wall", time.time_ns() // 1000)
        fields.setdefault("mono", time.monotonic_ns())
        with self.lock:
            os.write(self.fd, (json.dumps(fields, separators=(",", ":")) + "\n").encode())


class RedisServer:
    def __init__(self, work, port):
        self.work, self.port, self.proc = work, port, None

    def start(self):
        self.proc = subprocess.Popen(
            # A save point (never reached in a run) and protected configs: the refuse fault's
            # MISCONF comes from a BGSAVE into a dir it cannot write (CONFIG SET dir).
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "86400 1", "--enable-protected-configs", "yes", "--maxmemory-policy",
             "noeviction", "--appendonly", "yes", "--appendfsync", "always", "--dir", self.work,
             "--logfile", os.path.join(self.work, "redis.log")])
        for _ in range(400):
            try:
                if Redis("127.0.0.1", self.port).call("PING") == "PONG":
                    return
            except (OSError, RuntimeError):  # not listening yet, or LOADING its AOF
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("redis-server exited; see %s/redis.log" % self.work)
            time.sleep(0.05)
        raise RuntimeError("redis-server did not answer")

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()


class Proxy:
    """bench/latency_proxy with its control commands on stdin."""

    def __init__(self, binary, port, upstream):
        self.port = port
        self.proc = subprocess.Popen([binary, str(port), str(upstream), "0", "control"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("latency_proxy did not start")
        self.lock = threading.Lock()

    def send(self, command):
        with self.lock:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
            self.proc.stdout.readline()

    def stop(self):
        self.proc.stdin.close()
        self.proc.wait()


class Kiqd:
    """One member of the fleet: its config, its incarnations (restarts), its ledger."""

    def __init__(self, name, binary, config, work, env):
        self.name, self.binary, self.config, self.work = name, binary, config, work
        self.env = env
        self.incarnation = 0
        self.proc = None
        self.ledger = os.path.join(work, "ledger-%s.jsonl" % name)
        self.out = open(os.path.join(work, "%s.out" % name), "ab")

    @property
    def proc_name(self):
        return "%s.%d" % (self.name, self.incarnation)

    def start(self):
        self.incarnation += 1
        env = dict(os.environ, **self.env, CHAOS_PROC=self.proc_name, CHAOS_LEDGER=self.ledger)
        self.proc = subprocess.Popen([self.binary, "-C", self.config], env=env,
                                     stdout=self.out, stderr=subprocess.STDOUT)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        if self.running():
            self.proc.send_signal(sig)

    def stop(self, timeout=60):
        if not self.running():
            return None
        self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def runner_children(self):
        """PIDs of the runner processes (children of this kiqd running kiqd_runner.py)."""
        pids = []
        if not self.running():
            return pids
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % entry) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    cmd = f.read()
            except (OSError, IndexError, ValueError):
                continue
            if ppid == self.proc.pid and b"kiqd_runner.py" in cmd:
                pids.append(int(entry))
        return sorted(pids)


def config_yaml(port, concurrency, fetch, handler, job, runner=None):
    h = "{exec: [\"%s\"]}" % job if handler == "exec" else "{runner: py}"
    h_with = (lambda extra: h[:-1] + ", " + extra + "}")
    lines = [
        "redis: {url: \"redis://127.0.0.1:%d/0\", connect_timeout: 1}" % port,
        "queues: [chaos]",
        "concurrency: %d" % concurrency,
        "timeout: 8",
        "average_scheduled_poll_interval: 1",
        "cron_poll_interval: 2",
        "logging: {level: info}",
        "unique_jobs: {reaper_interval: %d}" % REAPER_INTERVAL,
        "concurrency_limits: {slot_ttl: %d, check_interval: %d}" % (SLOT_TTL, CHECK_INTERVAL),
        "cron:",
        "  - {name: chaos_tick, cron: \"*/10 * * * * *\", class: \"Chaos::Cron\", args: [20],"
        " queue: chaos, date_as_argument: true}",
        "handlers:",
        "  \"Chaos::Plain\": %s" % h,
        "  \"Chaos::Quick\": %s" % h,
        "  \"Chaos::Unique\": %s" % h_with(
            "lock: until_and_while_executing, lock_args: [2], on_conflict: reschedule"),
        "  \"Chaos::Limited\": %s" % h_with("concurrency_limit: 3"),
        "  \"Chaos::Throttled\": %s" % h_with("throttle: {limit: 2, period: 2}"),
        "  \"Chaos::Paused\": %s" % h,
        "  \"Chaos::FailOnce\": %s" % h,
        "  \"Chaos::Cron\": %s" % h,
    ]
    if fetch == "reliable":
        lines.append("fetch: reliable")
        lines.append("reliable_fetch: {liveness_ttl: %d, orphan_check_interval: %d, "
                     "batch_size: %d}" % (LIVENESS_TTL, ORPHAN_CHECK, 50 if handler == "exec" else 10))
    if runner:
        lines += ["runners:",
                  "  py: {command: [\"/usr/bin/python3\", \"%s\", \"--import\", \"chaos_jobs\"],"
                  " processes: 2, threads: 2, env: {PYTHONPATH: \"%s\"}}" % (runner, HERE)]
    return "\n".join(lines) + "\n"


class Producer(threading.Thread):
    """Pushes RATE jobs a second straight to Redis (not through a proxy), seeded. A push whose
    reply was lost (Redis killed) is recorded as unconfirmed: it may or may not have landed."""

    MIX = [("Chaos::Plain", 20), ("Chaos::Quick", 20), ("Chaos::Unique", 15), ("Chaos::Limited", 15),
           ("Chaos::Throttled", 10), ("Chaos::Paused", 10), ("Chaos::FailOnce", 10)]
    WORK_MS = {"Chaos::Plain": (50, 300), "Chaos::Quick": (50, 200), "Chaos::Unique": (200, 500),
               "Chaos::Limited": (1000, 3000), "Chaos::Throttled": (50, 200),
               "Chaos::Paused": (50, 300), "Chaos::FailOnce": (50, 300)}

    def __init__(self, seed, rate, port, events):
        super().__init__(daemon=True)
        self.rng = random.Random(seed * 7919 + 1)
        self.rate, self.port, self.events = rate, port, events
        self.stop_flag = threading.Event()
        self.count = 0
        self.conn = None

    def payload(self, n):
        classes = [c for c, w in self.MIX for _ in range(w)]
        cls = self.rng.choice(classes)
        lo, hi = self.WORK_MS[cls]
        args = [self.rng.randint(lo, hi)]
        if cls == "Chaos::FailOnce":
            args.append("fail_once")
        elif cls == "Chaos::Unique":
            args += ["u", "id%d" % self.rng.randrange(UNIQUE_IDS)]
        jid = "%024x" % self.rng.getrandbits(96)
        now = time.time()
        return cls, jid, args, json.dumps({"class": cls, "args": args, "jid": jid,
                                           "queue": "chaos", "retry": 5, "created_at": now,
                                           "enqueued_at": now})

    def push(self, raw):
        if self.conn is None:
            self.conn = Redis("127.0.0.1", self.port)
        self.conn.call("SADD", "queues", "chaos")
        self.conn.call("LPUSH", "queue:chaos", raw)

    def run(self):
        next_at = time.monotonic()
        while not self.stop_flag.is_set():
            cls, jid, args, raw = self.payload(self.count)
            self.count += 1
            confirmed = False
            try:
                self.push(raw)
                confirmed = True
            except (OSError, RuntimeError, ConnectionError):
                self.conn = None
                # Not retried: the push may have landed before the reply was lost.
            self.events.add(ev="push", jid=jid, cls=cls, args=args, confirmed=confirmed)
            next_at += 1.0 / self.rate
            delay = next_at - time.monotonic()
            if delay > 0:
                self.stop_flag.wait(delay)
            elif not confirmed:
                self.stop_flag.wait(0.2)


class Faults(threading.Thread):
    """One fault at a time on the seeded schedule; each recorded with its start and end."""

    KINDS = ["kill9", "runner_kill9", "deploy", "stall", "redis_kill9", "latency", "cut", "outage",
             "refuse"]

    def __init__(self, seed, every, fleet, proxies, redis, events, pauser_lock):
        super().__init__(daemon=True)
        self.rng = random.Random(seed)
        self.every, self.fleet, self.proxies, self.redis = every, fleet, proxies, redis
        self.events, self.lock = events, pauser_lock
        self.stop_flag = threading.Event()
        self.counts = {k: 0 for k in self.KINDS}

    def wait(self, seconds):
        self.stop_flag.wait(seconds)

    def record(self, kind, target, start, **extra):
        self.counts[kind] += 1
        self.events.add(ev="fault", kind=kind, target=target, start=start,
                        end=time.time_ns() // 1000, **extra)

    def one(self, kind):
        rng, now = self.rng, lambda: time.time_ns() // 1000
        start = now()
        if kind == "kill9":
            k = self.fleet[rng.choice("AC")]
            incarnation = k.proc_name
            k.signal(signal.SIGKILL)
            k.proc.wait()
            killed_at = now()
            self.wait(rng.uniform(1, 3))
            k.start()
            self.record(kind, incarnation, start, killed=killed_at)
        elif kind == "runner_kill9":
            k = self.fleet["C"]
            children = k.runner_children()
            if not children:
                return
            pid = rng.choice(children)
            os.kill(pid, signal.SIGKILL)
            self.record(kind, k.proc_name, start, pid=pid, killed=now())
        elif kind == "deploy":
            k = self.fleet[rng.choice("ABC")]
            incarnation = k.proc_name
            code = k.stop()
            stopped_at = now()
            k.start()
            self.record(kind, incarnation, start, stopped=stopped_at, exit=code)
        elif kind == "stall":
            k = self.fleet[rng.choice("ABC")]
            seconds = LIVENESS_TTL + rng.uniform(2, 6)
            k.signal(signal.SIGSTOP)
            self.wait(seconds)
            k.signal(signal.SIGCONT)
            self.record(kind, k.proc_name, start, seconds=seconds)
        elif kind == "redis_kill9":
            self.redis.kill9()
            killed_at = now()
            self.wait(rng.uniform(0.5, 2))
            self.redis.start()
            self.record(kind, "redis", start, killed=killed_at)
        elif kind == "refuse":
            self.refuse(rng.choice(["oom", "misconf"]), rng.uniform(3, 12), start)
        elif kind == "cut":
            name = rng.choice("AC")
            self.proxies[name].send("cut")
            self.record(kind, self.fleet[name].proc_name, start)
        else:  # a spell of latency or of Redis unreachable, through the process's proxy
            name = rng.choice("ABC" if kind == "latency" else "AC")
            seconds = rng.uniform(3, 8) if kind == "latency" else rng.uniform(1, 10)
            on, off = ("delay 200000", "delay 0") if kind == "latency" else ("down", "up")
            self.proxies[name].send(on)
            self.wait(seconds)
            self.proxies[name].send(off)
            self.record(kind, self.fleet[name].proc_name, start, seconds=seconds)

    def refuse(self, mode, seconds, start):
        """Redis refuses writes for `seconds`: OOM or MISCONF, then back to normal."""
        c = Redis("127.0.0.1", self.redis.port)
        if mode == "oom":
            info = c.call("INFO", "memory")
            used = int(info.split("used_memory:")[1].split()[0])
            c.call("CONFIG", "SET", "maxmemory", str(used + 1024 * 1024))
            # Filled by another client until Redis says no, big values first: a value that
            # would cross maxmemory is refused while a smaller one still fits.
            for size in (65536, 4096, 256, 16):
                for _ in range(2000):
                    try:
                        c.call("RPUSH", "chaos:filler", "x" * size)
                    except RuntimeError:
                        break
            # Acknowledgements (LREM) and shrinking client buffers free some memory: a margin
            # keeps it full.
            info = c.call("INFO", "memory")
            used = int(info.split("used_memory:")[1].split()[0])
            c.call("CONFIG", "SET", "maxmemory", str(used - 1024 * 1024))
        else:
            c.call("CONFIG", "SET", "dir", "/proc")
            c.call("BGSAVE")
        self.wait(seconds)
        if mode == "oom":
            c.call("DEL", "chaos:filler")
            c.call("CONFIG", "SET", "maxmemory", "0")
        else:
            c.call("CONFIG", "SET", "dir", self.redis.work)
            c.call("BGSAVE")
        wait_for("writes accepted again",
                 lambda: c.call("SET", "chaos:probe", "1") == "OK", 30)
        self.record("refuse", "redis", start, mode=mode, seconds=seconds)

    def run(self):
        while not self.stop_flag.is_set():
            self.wait(self.rng.uniform(0.5, 1.5) * self.every)
            if self.stop_flag.is_set():
                break
            kind = self.rng.choice(self.KINDS)
            with self.lock:
                try:
                    self.one(kind)
                except Exception as e:  # a harness problem: say so, keep going
                    log("fault %s failed: %r" % (kind, e))


class Pauser(threading.Thread):
    """Pauses and resumes the Chaos::Paused worker every PAUSE_EVERY s (kiqd pause worker)."""

    def __init__(self, kiqd_bin, admin_config, events, lock):
        super().__init__(daemon=True)
        self.kiqd, self.config, self.events, self.lock = kiqd_bin, admin_config, events, lock
        self.stop_flag = threading.Event()
        self.paused = False

    def set(self, paused):
        for _ in range(20):
            r = subprocess.run([self.kiqd, "pause" if paused else "resume", "worker",
                                "Chaos::Paused", "-C", self.config], capture_output=True)
            if r.returncode == 0:
                self.paused = paused
                self.events.add(ev="pause" if paused else "resume")
                return True
            time.sleep(0.5)  # Redis restarting
        return False

    def run(self):
        while not self.stop_flag.wait(PAUSE_EVERY):
            with self.lock:
                self.set(not self.paused)


def wait_for(what, predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except (OSError, RuntimeError, ConnectionError):
            pass
        time.sleep(0.5)
    log("timed out waiting for %s" % what)
    return False


def drained(conn):
    """Nothing queued, scheduled, retrying, parked or in a working list, and every confirmed
    push has a completed run in the ledgers."""
    if conn.call("LLEN", "queue:chaos") or conn.call("ZCARD", "retry") or \
            conn.call("ZCARD", "schedule"):
        return False
    for key in conn.call("SMEMBERS", "kiqd:reliable:working") or []:
        if conn.call("LLEN", key):
            return False
    return True


def main():
    # A SIGTERM (a timeout, an operator) ends the run through the cleanup below, so that no
    # kiqd, proxy or redis-server of the run is left behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    seed = int(os.environ.get("SEED", "1"))
    duration = float(os.environ.get("DURATION", "120"))
    rate = float(os.environ.get("RATE", "8"))
    every = float(os.environ.get("FAULT_EVERY", "8"))
    build = os.path.abspath(os.environ.get("BUILD", os.path.join(REPO, "build")))
    kiqd_bin = os.environ.get("KIQD", os.path.join(build, "kiqd"))
    for b in (kiqd_bin, os.path.join(build, "latency_proxy"), os.path.join(build, "chaos_job")):
        if not os.access(b, os.X_OK):
            sys.exit("chaos: no %s (cmake --build %s --target kiqd latency_proxy chaos_job)"
                     % (b, build))
    work = os.environ.get("WORK") or tempfile.mkdtemp(prefix="kiqd-chaos.")
    os.makedirs(work, exist_ok=True)
    log("seed %d, %g s of load at %g jobs/s, a fault every ~%g s; files in %s"
        % (seed, duration, rate, every, work))
    redis = RedisServer(work, free_port())
    redis.start()
    proxies = {n: Proxy(os.path.join(build, "latency_proxy"), free_port(), redis.port)
               for n in "ABC"}
    job = os.path.join(build, "chaos_job")
    runner = os.path.join(REPO, "runners", "python", "kiqd_runner.py")
    specs = {"A": ("reliable", "exec", None), "B": ("basic", "exec", None),
             "C": ("reliable", "runner", runner)}
    fleet = {}
    for n, (fetch, handler, run) in specs.items():
        path = os.path.join(work, "%s.yml" % n)
        with open(path, "w") as f:
            f.write(config_yaml(proxies[n].port, CONCURRENCY[n], fetch, handler, job, run))
        fleet[n] = Kiqd(n, kiqd_bin, path, work, {})
    admin = os.path.join(work, "admin.yml")
    with open(admin, "w") as f:
        f.write("redis: {url: \"redis://127.0.0.1:%d/0\"}\nqueues: [chaos]\n" % redis.port)
    events = Events(os.path.join(work, "events.jsonl"))
    ok = False
    threads = []
    try:
        for k in fleet.values():
            k.start()
        time.sleep(3)
        for k in fleet.values():
            if not k.running():
                with open(os.path.join(work, "%s.out" % k.name), "rb") as f:
                    sys.stderr.write(f.read()[-3000:].decode(errors="replace"))
                raise RuntimeError("kiqd %s exited at start" % k.name)
        t0 = time.time()
        events.add(ev="begin", seed=seed, duration=duration, rate=rate)
        lock = threading.Lock()
        producer = Producer(seed, rate, redis.port, events)
        faults = Faults(seed, every, fleet, proxies, redis, events, lock)
        pauser = Pauser(kiqd_bin, admin, events, lock)
        threads = [producer, faults, pauser]
        for t in threads:
            t.start()
        while time.time() - t0 < duration:
            time.sleep(1)
        producer.stop_flag.set()
        faults.stop_flag.set()
        pauser.stop_flag.set()
        for t in (producer, faults, pauser):
            t.join()
        events.add(ev="load_end")
        log("load over: %d pushed; faults %s" % (producer.count, faults.counts))
        # Heal: every process up and running, every proxy clean, the worker resumed.
        for n, p in proxies.items():
            p.send("up")
            p.send("delay 0")
        for k in fleet.values():
            k.signal(signal.SIGCONT)
            if not k.running():
                k.start()
        pauser.set(False)
        conn_box = {}

        def conn():
            if "c" not in conn_box:
                conn_box["c"] = Redis("127.0.0.1", redis.port)
            return conn_box["c"]

        def is_drained():
            try:
                dead = {json.loads(m).get("jid") for m in conn().call("ZRANGE", "dead", 0, -1)}
                return drained(conn()) and chaos_check.all_ran(work, dead)
            except (OSError, RuntimeError, ConnectionError):
                conn_box.clear()
                raise

        drain_ok = wait_for("the drain", is_drained, float(os.environ.get("DRAIN_TIMEOUT", 300)))
        events.add(ev="drained", ok=drain_ok)
        log("drained" if drain_ok else "NOT drained")
        # Locks and slots: whatever a killed process left must be gone within two reaper
        # intervals (and the slot TTL).
        settle = max(2 * REAPER_INTERVAL, SLOT_TTL + CHECK_INTERVAL)
        log("waiting %d s for leftover locks and slots to be reaped" % settle)
        time.sleep(settle)
        leftovers = chaos_check.leftover_locks(conn())
        for k in fleet.values():
            k.stop()
        stats = {"processed": int(conn().call("GET", "stat:processed") or 0),
                 "failed": int(conn().call("GET", "stat:failed") or 0)}
        sets = {name: conn().call("ZRANGE", name, 0, -1) for name in ("retry", "dead")}
        report = chaos_check.check(work, LIVENESS_TTL, leftovers, stats, sets, drain_ok,
                                   limit=3, unique_class="Chaos::Unique")
        ok = report["ok"]
        with open(os.path.join(work, "report.json"), "w") as f:
            json.dump(report, f, indent=1)
        chaos_check.print_report(report)
    finally:
        # The fault thread first: it may be about to restart a process.
        for t in threads:
            t.stop_flag.set()
        for t in threads:
            t.join()
        for k in fleet.values():
            k.stop()
        for p in proxies.values():
            p.stop()
        redis.stop()
        if ok and not os.environ.get("KEEP") and not os.environ.get("WORK"):
            shutil.rmtree(work, ignore_errors=True)
        else:
            log("files kept in %s" % work)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
