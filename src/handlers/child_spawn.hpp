#pragma once
// spawn_child: starts a job's command as kiqd's child. What the child gets, and why:
//   * descriptors 0-2 from the caller's pipes (and 3, a runner's protocol socket, when given),
//     nothing else (everything above is closed before exec, whether or not it was close-on-exec);
//   * its own process group (a timeout or shutdown signals the command's children too);
//   * every signal at its default disposition and none blocked (kiqd ignores SIGPIPE and its
//     threads block signals; the command must not inherit either);
//   * PR_SET_PDEATHSIG = SIGKILL: it dies with the thread that started it, so a kiqd killed with
//     SIGKILL (or crashed) does not leave the job running while a peer recovers it from the
//     working list and runs it again — two copies at once. The processor thread that spawns a
//     command outlives it, so the signal only ever fires when kiqd itself is gone;
//   * its process group registered with the group keeper (group_keeper.hpp) before exec, so
//     that what the command starts itself ends with kiqd too. The caller releases the group
//     (release_process_group) once it has reaped the child.
// posix_spawn cannot set PR_SET_PDEATHSIG, so this is vfork + exec, done the way glibc's
// posix_spawn does it: every signal blocked around vfork (no kiqd handler can run in the child,
// which shares kiqd's memory until exec), only system calls in the child, errno reported
// through memory the child shares with the parent.
// Also the small helpers both spawners (exec_handler, runner_pool) use on a started child: a
// pidfd to poll for its exit, non-blocking pipe ends, and the wait status in words.
// The caller's thread; no state.
#include <sys/types.h>

#include <string>

namespace kiqd {

struct SpawnedChild {
    pid_t pid = -1;
    int error = 0;  // errno of the failed start (fork or exec), 0 when the child runs
};

// argv[0] is looked up in PATH when it has no '/', as execvp does. argv and envp are
// null-terminated. `fd3` >= 0 becomes the child's descriptor 3.
SpawnedChild spawn_child(char* const argv[], char* const envp[], int stdin_fd, int stdout_fd,
                         int stderr_fd, int fd3 = -1);

// A pidfd for `pid` (close-on-exec by definition), or -1 with errno set (ENOSYS where the
// kernel headers lack pidfd_open): callers then reap on a timer.
int open_pidfd(pid_t pid);

void set_nonblocking(int fd);

// Closes every descriptor from `first` up, whether or not it is close-on-exec; system calls only.
void close_descriptors_from(int first);

// "SIGKILL" for 9; the number itself for a signal glibc has no name for.
std::string signal_name(int sig);

// "exited with status 3", "was killed by signal 9 (SIGKILL)": a wait status for messages.
std::string describe_wait_status(int status);

}  // namespace kiqd
