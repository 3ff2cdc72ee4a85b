#pragma once
// The exec guard: a small process between kiqd and each `exec:` command, so that the command's
// whole process tree ends with kiqd, however kiqd ends (kill -9, the OOM killer, a crash) and
// however it was started (a shell, supervisord, runit, a container or systemd alike).
// PR_SET_PDEATHSIG reaches only a direct child: a command's own children (`sh -c "a | b"`, a
// script that starts a helper) used to outlive a killed kiqd, and with reliable fetch the job
// was then recovered and run again while they still ran: two copies at once, outside any unique
// lock or concurrency slot.
//
// What the guard is: kiqd's own binary again (/proc/self/exe, so no second file to install or
// find, and an application that embeds kiqd through its library works the same), started as
// `kiqd-exec-guard <command...>`; a constructor in this file sees that argv[0] before main and
// runs the guard instead (guard_main). It
//   * is its command's parent and a child subreaper (PR_SET_CHILD_SUBREAPER), so every
//     descendant whose own parent dies is reparented to it, not to init;
//   * holds the read end of kiqd's lifeline, a pipe whose write end only kiqd holds: when kiqd is
//     gone, however, the pipe reads EOF. The guard then SIGKILLs its children, reaps them, kills
//     the ones reparented to it meanwhile, and so on until it has no child left;
//   * otherwise mirrors its command: the same exit status, or death by the same signal, so
//     kiqd sees what the command did. It leads the command's process group (kiqd's timeout and
//     shutdown signal the group), ignores SIGTERM there (the command gets it and ends, and the
//     guard then ends as it did), and dies with SIGKILL like the rest of the group;
//   * reports a command that could not start (its errno, over a pipe kiqd reads once), so the
//     job fails with "cannot start …" as without the guard.
// If the guard cannot start (no /proc), the command starts unguarded, as before, and
// spawn_guarded says so.
// Any thread (spawn_guarded); the lifeline is created once, on first use.
#include "handlers/child_spawn.hpp"

namespace kiqd {

struct GuardedSpawn {
    SpawnedChild child;    // the guard (pid, or the command's start error)
    bool guarded = false;  // false: the guard could not start; the command runs unguarded
};

// spawn_child for an exec command, through the guard.
GuardedSpawn spawn_guarded(char* const argv[], char* const envp[], int stdin_fd, int stdout_fd,
                           int stderr_fd);

}  // namespace kiqd
