#pragma once
// The group keeper: one small process per kiqd that kills the process group of every command
// kiqd still has running once kiqd itself is gone, however it ended (kill -9, a crash, the OOM
// killer) and however it was started.
//
// Why: a command started by spawn_child dies with kiqd (PR_SET_PDEATHSIG), but that signal
// reaches the direct child only. What the command started itself (the parts of `sh -c "a | b"`,
// a helper, a background process) would run on, and with reliable fetch a peer recovers the job
// and runs it again: two copies at once, outside any unique lock or concurrency slot. systemd's
// KillMode=mixed and a container's end clean these up; a shell, supervisord or runit do not.
//
// How: kiqd holds one end of a socket pair, the keeper the other. Each child registers its own
// pid (its process group: spawn_child makes it the leader) between vfork and exec, so the group
// is never unregistered while it runs; kiqd releases the group once it has reaped the leader.
// When its end of the socket reads end of file, kiqd is gone, and the keeper sends SIGKILL to
// every group still registered, then exits. The keeper is kiqd's own binary started again
// (`/proc/self/exe`, so a fresh process that holds none of kiqd's memory), in a session of its
// own and deaf to stop signals, so that a Ctrl-C or a SIGTERM to kiqd cannot end it first; it
// shows as `kiqd-keeper` in ps and is idle between jobs.
// Not covered: a process that leaves the command's process group (setsid, setpgid); under
// systemd the unit's cgroup still ends with kiqd.
// A keeper that dies on its own is started again by the next spawn, which registers the groups
// still running. Any thread.
#include <sys/types.h>

namespace kiqd {

// The descriptor a child registers its group on (spawn_child sends its pid there), starting
// the keeper on first use or after it died; -1 when it cannot be started.
int process_group_keeper();

// In kiqd, after spawning a child: registers its group again from kiqd's side, and keeps
// kiqd's own record of the groups running, which a restarted keeper is given.
void keep_process_group(pid_t group);

// After the group's leader has been reaped: the group id may be reused from now on, so the
// keeper must never signal it.
void release_process_group(pid_t group);

// The keeper's `argv[1]`: kiqd::run hands the process to run_group_keeper when it sees it.
inline constexpr const char* kGroupKeeperArg = "--kiqd-group-keeper";

// The keeper process itself (its socket is descriptor 3). Never returns.
[[noreturn]] void run_group_keeper();

}  // namespace kiqd
