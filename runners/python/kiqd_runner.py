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
        def retry_in(count, exc):          # optional: seconds until retry `count` (0 = first)
            return 60
        @staticmethod
        def retries_exhausted(job, exc):   # optional: called when kiqd gives up on the job
            ...
        def perform(self, invoice_id):
            ...

Each job gets a fresh instance with `jid` and `job` (the whole payload) set. An exception fails
the job with its class name, message and Python traceback (innermost frame first, as Sidekiq
shows Ruby's); retries and the dead set are kiqd's. Standard library only.
"""

import importlib
import json
import os
import socket
import struct
import sys
import traceback

__all__ = ["job", "registry", "main"]

_registry = {}
MAX_FRAME = 64 * 1024 * 1024


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
    def __init__(self, fd):
        self.sock = socket.socket(fileno=fd)

    def send(self, kind, obj):
        body = kind.encode() + b"\n" + json.dumps(obj).encode()
        self.sock.sendall(struct.pack(">I", len(body)) + body)

    def _exactly(self, n):
        chunks = []
        while n:
            chunk = self.sock.recv(min(n, 1 << 20))
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


def _run(channel, raw):
    payload = json.loads(raw)
    cls = None
    try:
        name = payload.get("class")
        cls = _registry.get(name)
        if cls is None:
            raise NameError("uninitialized constant %s (no Python job class is registered for it)" % name)
        instance = cls()
        instance.jid = payload.get("jid")
        instance.job = payload
        instance.perform(*payload.get("args", []))
        channel.send("done", {})
    except Exception as exc:  # a job's failure, whatever it is
        reply = {"class": _error_class(exc), "message": str(exc), "backtrace": _backtrace(exc)}
        retry_in = getattr(cls, "retry_in", None) if cls else None
        if retry_in:
            count = payload["retry_count"] + 1 if payload.get("retry_count") is not None else 0
            try:
                delay = int(retry_in(count, exc))
                if delay > 0:
                    reply["retry_in"] = delay
            except Exception as err:
                print("kiqd_runner: retry_in of %s raised %r; using the default delay" % (cls.__name__, err),
                      file=sys.stderr)
        channel.send("fail", reply)


def _exhausted(channel, data):
    req = json.loads(data)
    payload, error = req.get("job", {}), req.get("error", {})
    cls = _registry.get(payload.get("class"))
    hook = getattr(cls, "retries_exhausted", None) if cls else None
    if hook:
        try:
            hook(payload, RuntimeError("%s: %s" % (error.get("class"), error.get("message"))))
        except Exception as err:
            print("kiqd_runner: retries_exhausted of %s raised %r" % (cls.__name__, err), file=sys.stderr)
    channel.send("done", {})


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
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)
    for p in args.path:
        sys.path.insert(0, os.path.abspath(p))
    sys.modules.setdefault("kiqd_runner", sys.modules[__name__])  # one registry when run as a script
    for m in args.modules:
        importlib.import_module(m)
    channel = _Channel(int(fd))
    channel.send("ready", {"pid": os.getpid(), "runner": "kiqd_runner.py (python %s)" % sys.version.split()[0]})
    while True:
        kind, data = channel.recv()
        if kind is None:
            return
        if kind == "job":
            _run(channel, data)
        elif kind == "exhausted":
            _exhausted(channel, data)
        else:
            sys.exit("kiqd_runner: unknown frame %r" % kind)


if __name__ == "__main__":
    main()
