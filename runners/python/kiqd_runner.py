"""kiqd_runner: Python job classes run by kiqd's persistent runners.

kiqd starts this module as a runner (docs/runner-protocol.md in kiqd's sources):

    runners:
      py:
        command: ["/usr/bin/python3", "/usr/lib/kiqd/python/kiqd_runner.py", "--import", "jobs"]
    handlers:
      "*": {runner: py}

and the imported modules register their job classes with the decorator:

    import kiqd_runner

    @kiqd_runner.job                       # the Sidekiq class name is the Python class name
    class HardWorker:
        def perform(self, name, count):    # the job's args
            ...

    @kiqd_runner.job("Billing::Invoice")  # or any name
    class Invoice:
        @staticmethod
        def retry_in(count, exc):          # optional: seconds until retry `count` (0 = first),
            return 60                      # or "kill" (dead set at once) or "discard" (dropped)
        @staticmethod
        def retries_exhausted(job, exc):   # optional: called when kiqd gives up on the job
            ...
        def perform(self, invoice_id):
            ...

Each job gets a fresh instance with `jid` and `job` (the whole payload) set. An exception fails
the job with its class name, message and Python traceback (innermost frame first, as Sidekiq
shows Ruby's); retries and the dead set are kiqd's. Standard library only.

KIQD_RUNNER_THREADS (default 1) jobs run at once, on a pool of threads that share the socket: a
thread reads one frame under the read lock, runs the job and writes its answer under the write
lock (the tagged dialect: `job TAG` is answered `done TAG` / `fail TAG`; an untagged `job` is
answered untagged); a watcher thread reads `quiet` while every worker runs a long job. The
runner asks for a socket per seat ("seats": true in `ready`): a kiqd that gives them sends each
job on a seat's own socket, untagged, and a seat thread per socket reads it, runs it and answers
there, so no read lock changes hands per job and kiqd's thread that sent the job reads the answer
itself; the workers then only read `quiet` and the end of file. After kiqd's `quiet` (or
SIGTERM), `kiqd_runner.stopping()` is true: a long job may stop early. SIGTERM exits at once
without answering for the running jobs (kiqd requeues them); end of file on the socket lets the
running jobs finish and answer, then the process exits 0.
"""

import importlib
import json
import os
import signal
import socket
import struct
import sys
import threading
import time
import traceback

__all__ = ["job", "registry", "stopping", "main"]

_registry = {}
_stopping = threading.Event()
MAX_FRAME = 64 * 1024 * 1024
MAX_THREADS = 1024
MAX_FDS_PER_FRAME = 256  # kiqd attaches at most 250 seats to one `seats` frame


def stopping():
    """True once kiqd is quieting or shutting down: a long job may stop early."""
    return _stopping.is_set()


def registry():
    """The registered job classes, by Sidekiq class name."""
    return dict(_registry)


def job(name_or_class=None):
    """Registers a job class: @job, or @job("Sidekiq::Name")."""

    def register(cls, name=None):
        if not callable(getattr(cls, "perform", None)):
            raise TypeError("%r has no perform method" % (cls,))
        _registry[name or cls.__name__] = cls
        return cls

    if isinstance(name_or_class, type):
        return register(name_or_class)
    return lambda cls: register(cls, name_or_class)


class _Channel:
    """The protocol socket, or one seat's. recv() has one reader at a time: on the protocol socket
    the holder of read_lock, on a seat its thread. send() takes write_lock, so that frames of
    several threads never interleave. On the protocol socket, descriptors attached to a frame (the
    `seats` frame) are kept in `fds`, in order."""

    def __init__(self, fd):
        self.sock = socket.socket(fileno=fd)
        self.sock.setblocking(True)  # worker threads wait in recv() itself
        self.read_lock = threading.Lock()
        self.write_lock = threading.Lock()
        self.fds = None  # a list once accept_fds() is called

    def accept_fds(self):
        """From now on reads use recvmsg(2) and keep the descriptors that come with the bytes."""
        self.fds = []

    def send(self, kind, obj):
        body = kind.encode() + b"\n" + json.dumps(obj).encode()
        with self.write_lock:
            self.sock.sendall(struct.pack(">I", len(body)) + body)

    def _exactly(self, n):
        chunks = []
        while n:
            if self.fds is None:
                chunk = self.sock.recv(min(n, 1 << 20))
            else:
                chunk, fds, _flags, _addr = socket.recv_fds(self.sock, min(n, 1 << 20), MAX_FDS_PER_FRAME)
                self.fds.extend(fds)
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def recv(self):
        head = self._exactly(4)
        if head is None:
            return None, None
        (n,) = struct.unpack(">I", head)
        if n > MAX_FRAME:
            raise ValueError("frame of %d bytes" % n)
        body = self._exactly(n) if n else b""
        if body is None:
            return None, None
        kind, _, data = body.partition(b"\n")
        return kind.decode("ascii", "replace"), data


def _backtrace(exc):
    frames = traceback.extract_tb(exc.__traceback__)
    return ["%s:%d:in `%s'" % (f.filename, f.lineno, f.name) for f in reversed(frames)]


def _error_class(exc):
    cls = type(exc)
    return cls.__name__ if cls.__module__ in ("builtins", "__main__") else cls.__module__ + "." + cls.__name__


def _run(raw):
    """Runs one job; returns the answer, ("done", {}) or ("fail", {...})."""
    payload = {}
    cls = None
    try:
        payload = json.loads(raw)
        name = payload.get("class")
        cls = _registry.get(name)
        if cls is None:
            raise NameError("uninitialized constant %s (no Python job class is registered for it)" % name)
        instance = cls()
        instance.jid = payload.get("jid")
        instance.job = payload
        instance.perform(*payload.get("args", []))
        return "done", {}
    except Exception as exc:  # a job's failure, whatever it is
        reply = {"class": _error_class(exc), "message": str(exc), "backtrace": _backtrace(exc)}
        retry_in = getattr(cls, "retry_in", None) if cls else None
        if retry_in:
            count = payload["retry_count"] + 1 if payload.get("retry_count") is not None else 0
            try:
                delay = retry_in(count, exc)
                if delay in ("kill", "discard"):  # straight to the dead set / dropped
                    reply["retry_in"] = delay
                elif int(delay) > 0:
                    reply["retry_in"] = int(delay)
            except Exception as err:
                print("kiqd_runner: retry_in of %s raised %r; using the default delay" % (cls.__name__, err),
                      file=sys.stderr)
        return "fail", reply


def _exhausted(data):
    req = json.loads(data)
    payload, error = req.get("job", {}), req.get("error", {})
    cls = _registry.get(payload.get("class"))
    hook = getattr(cls, "retries_exhausted", None) if cls else None
    if hook:
        try:
            hook(payload, RuntimeError("%s: %s" % (error.get("class"), error.get("message"))))
        except Exception as err:
            print("kiqd_runner: retries_exhausted of %s raised %r" % (cls.__name__, err), file=sys.stderr)
    return "done", {}


class _Server:
    """The thread pool of a runner process. Each worker reads a frame, runs it and answers it
    itself (no hand-off per job). kiqd sends at most `threads` jobs at once, so while every worker
    runs one nobody reads and `quiet` would wait: a watcher thread looks every QUIET_TICK and,
    when every worker is busy and one is still on the job it had at the last look, reads in
    their place (short jobs never wake it). The main thread waits for SIGTERM or for the end."""

    QUIET_TICK = 0.05

    def __init__(self, channel, threads):
        self.channel = channel
        self.threads = threads
        self.eof = False
        self.running = [None] * threads  # per worker: its job count while it runs one
        # Seat threads and their channels join these when a `seats` frame comes (under the read
        # lock); the main thread and SIGTERM's handler only read them.
        self.workers = []
        self.seats = []

    def _next_frame(self):
        with self.channel.read_lock:
            while not self.eof:
                kind, data = self.channel.recv()
                if kind is None:
                    self._end_of_file()
                elif kind == "quiet":
                    _stopping.set()
                elif kind == "seats":
                    self._take_seats(data)
                else:
                    return kind, data
            return None, None

    def _take_seats(self, data):
        """A `seats` frame: one seat thread per socket that came with it."""
        count = int(json.loads(data)["count"])
        fds = self.channel.fds[:count]
        del self.channel.fds[:count]
        if len(fds) != count:
            _fatal("a 'seats' frame for %d sockets came with %d" % (count, len(fds)))
        for fd in fds:
            seat = _Channel(fd)
            self.seats.append(seat)
            t = threading.Thread(target=self._seat, args=(seat,), name="kiqd-runner-seat-%d" % fd, daemon=True)
            self.workers.append(t)
            t.start()

    def _end_of_file(self):
        """kiqd closed the protocol socket: no new job comes, on any seat either. The seats' reading
        sides are shut, so that their threads end once their job is answered."""
        self.eof = True
        for seat in self.seats:
            try:
                seat.sock.shutdown(socket.SHUT_RD)
            except OSError:
                pass

    def _seat(self, seat):
        """A seat's jobs, one at a time, untagged, until kiqd closes the seat (or the process)."""
        try:
            while True:
                kind, data = seat.recv()
                if kind is None:
                    return
                self._serve(kind, data, seat)
        except BaseException as exc:
            _fatal("%s: %s" % (type(exc).__name__, exc))

    def _serve(self, kind, data, channel=None):
        name, _, tag = kind.partition(" ")
        if name == "job":
            answer, obj = _run(data)
        elif name == "exhausted":
            answer, obj = _exhausted(data)
        else:
            _fatal("unknown frame %r" % kind)
        (channel or self.channel).send(answer + " " + tag if tag else answer, obj)

    def _work(self, slot):
        try:
            started = 0
            while True:
                kind, data = self._next_frame()
                if kind is None:
                    return
                started += 1
                self.running[slot] = started
                self._serve(kind, data)
                self.running[slot] = None
        except BaseException as exc:  # the socket, the protocol, or a job's sys.exit(): the
            _fatal("%s: %s" % (type(exc).__name__, exc))  # process ends, kiqd fails its jobs

    def _watch(self):
        try:
            last = None
            while not self.eof:
                time.sleep(self.QUIET_TICK)
                now = list(self.running)
                if last and all(now) and any(a == b for a, b in zip(now, last)):
                    kind, data = self._next_frame()
                    if kind is None:
                        return
                    self._serve(kind, data)
                    now = None
                last = now
        except BaseException as exc:
            _fatal("%s: %s" % (type(exc).__name__, exc))

    def _terminate(self, signum, frame):
        # No answer for the running jobs (kiqd requeues them once this process is gone); a frame
        # being written is finished first, so kiqd never reads half of one.
        _stopping.set()
        deadline = time.monotonic() + 0.5
        for channel in [self.channel] + list(self.seats):
            channel.write_lock.acquire(timeout=max(deadline - time.monotonic(), 0))
        os._exit(0)

    def run(self):
        signal.signal(signal.SIGTERM, self._terminate)
        self.channel.accept_fds()
        self.channel.send("ready", {"pid": os.getpid(), "threads": self.threads, "seats": True,
                                    "runner": "kiqd_runner.py (python %s)" % sys.version.split()[0]})
        workers = [threading.Thread(target=self._work, args=(i,), name="kiqd-runner-%d" % i, daemon=True)
                   for i in range(self.threads)]
        workers.append(threading.Thread(target=self._watch, name="kiqd-runner-watch", daemon=True))
        self.workers.extend(workers)
        for w in workers:
            w.start()
        # Seat threads are appended while this runs; they end after the workers (end of file on
        # the protocol socket shuts the seats), so the list is complete once the loop reaches them.
        i = 0
        while i < len(self.workers):
            w = self.workers[i]
            while w.is_alive():
                w.join(1.0)  # a timed join: SIGTERM's handler runs meanwhile
            i += 1


def _fatal(message):
    print("kiqd_runner: %s" % message, file=sys.stderr)
    os._exit(2)


def _threads_from_env():
    text = os.environ.get("KIQD_RUNNER_THREADS", "1")
    try:
        n = int(text, 10)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_THREADS:
        print("kiqd_runner: KIQD_RUNNER_THREADS must be a whole number from 1 to %d, not %r"
              % (MAX_THREADS, text), file=sys.stderr)
        sys.exit(78)
    return n


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(description="kiqd runner for Python job classes")
    parser.add_argument("--import", dest="modules", action="append", default=[],
                        help="a module that registers job classes (repeatable)")
    parser.add_argument("--path", action="append", default=[], help="added to sys.path first")
    args = parser.parse_args(argv)
    fd = os.environ.get("KIQD_RUNNER_FD")
    if fd is None:
        sys.exit("kiqd_runner: KIQD_RUNNER_FD is not set (kiqd starts this program)")
    threads = _threads_from_env()
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)
    for p in args.path:
        sys.path.insert(0, os.path.abspath(p))
    sys.modules.setdefault("kiqd_runner", sys.modules[__name__])  # one registry when run as a script
    for m in args.modules:
        importlib.import_module(m)
    _Server(_Channel(int(fd)), threads).run()


if __name__ == "__main__":
    main()
