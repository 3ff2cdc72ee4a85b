#!/usr/bin/python3
"""Runs a command, passes SIGTERM and SIGINT on to it, and once it has exited writes to a file the
CPU seconds (user + system) of the command and of every descendant it waited for; exits with the
command's status (128 + the signal that ended it).

    cpu_time.py OUT_FILE COMMAND [ARG...]
"""

import os
import resource
import signal
import sys


def main():
    out, argv = sys.argv[1], sys.argv[2:]
    pid = os.fork()
    if pid == 0:
        os.execv(argv[0], argv)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _frame: os.kill(pid, s))
    _, status = os.waitpid(pid, 0)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out, "w") as f:
        f.write("%.6f\n" % (usage.ru_utime + usage.ru_stime))
    sys.exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


if __name__ == "__main__":
    main()
