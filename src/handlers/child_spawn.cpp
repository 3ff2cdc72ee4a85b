#include "handlers/child_spawn.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "handlers/group_keeper.hpp"

namespace kiqd {
namespace {

// Moves `fd` to `target`. A source that is itself 0-2 is first copied above 2, so that one
// dup2 cannot overwrite a source another still needs.
int move_to(int fd, int target) {
    if (fd == target) {
        // dup2 onto itself would keep close-on-exec; clear it instead.
        return ::fcntl(fd, F_SETFD, 0);
    }
    return ::dup2(fd, target) < 0 ? -1 : 0;
}

}  // namespace

// Everything from `first` up. close_range (Linux 5.9) in one call; on older kernels, each number
// up to the descriptor limit (no /proc walk: it would allocate, and this runs in a vfork child).
void close_descriptors_from(int first) {
    if (::syscall(SYS_close_range, static_cast<unsigned>(first), ~0U, 0U) == 0) return;
    struct rlimit lim {};
    long top = 65536;
    if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
        top = static_cast<long>(lim.rlim_cur);
    for (long fd = first; fd < top; ++fd) ::close(static_cast<int>(fd));
}

SpawnedChild spawn_child(char* const argv[], char* const envp[], int stdin_fd, int stdout_fd,
                         int stderr_fd, int fd3) {
    // Taken (and the keeper started when needed) before vfork: the child may only make system
    // calls.
    const int keeper = process_group_keeper();
    sigset_t all, old;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &old);
    const pid_t parent = ::getpid();
    volatile int child_error = 0;
    int fds[4] = {stdin_fd, stdout_fd, stderr_fd, fd3};
    const int count = fd3 >= 0 ? 4 : 3;
    const pid_t pid = ::vfork();
    if (pid == 0) {
        // The child: system calls only, until exec or _exit.
        int err = 0;
        if (::setpgid(0, 0) != 0 || ::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) err = errno;
        // kiqd may have died between vfork and prctl; then nothing would ever kill this child.
        if (!err && ::getppid() != parent) ::_exit(127);
        // Registered before exec, so the group never runs unknown to the keeper (one small
        // message; a keeper that is gone is started again by the next spawn, which registers
        // this group from kiqd's own record).
        if (!err && keeper >= 0) {
            const pid_t self = ::getpid();
            ::send(keeper, &self, sizeof self, MSG_NOSIGNAL);
        }
        for (int i = 0; i < count && !err; ++i) {
            if (fds[i] >= 0 && fds[i] < count && fds[i] != i) {
                const int copy = ::fcntl(fds[i], F_DUPFD, count);
                if (copy < 0) err = errno;
                fds[i] = copy;
            }
        }
        for (int i = 0; i < count && !err; ++i)
            if (move_to(fds[i], i) != 0) err = errno;
        if (!err) {
            close_descriptors_from(count);
            struct sigaction dfl {};
            dfl.sa_handler = SIG_DFL;
            for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);
            sigset_t none;
            sigemptyset(&none);
            ::sigprocmask(SIG_SETMASK, &none, nullptr);
            ::execvpe(argv[0], argv, envp);
            err = errno;
        }
        child_error = err ? err : EINVAL;
        ::_exit(127);
    }
    const int fork_error = pid < 0 ? errno : 0;
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (pid < 0) return {-1, fork_error};
    if (child_error != 0) {
        // The child has already exited (vfork returns once it has exec'd or exited).
        int status = 0;
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        release_process_group(pid);
        return {-1, child_error};
    }
    keep_process_group(pid);
    return {pid, 0};
}

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
    return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

void set_nonblocking(int fd) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

std::string signal_name(int sig) {
    const char* abbrev = ::sigabbrev_np(sig);
    return abbrev ? std::string("SIG") + abbrev : std::to_string(sig);
}

std::string describe_wait_status(int status) {
    if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
    if (WIFSIGNALED(status))
        return fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                           signal_name(WTERMSIG(status)));
    return fmt::format("ended with wait status {}", status);
}

}  // namespace kiqd
