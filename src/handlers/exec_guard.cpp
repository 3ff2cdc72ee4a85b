#include "handlers/exec_guard.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace kiqd {
namespace {

constexpr const char* kGuardName = "kiqd-exec-guard";
// The guard's descriptors besides 0-2: the lifeline's read end, and the write end of the pipe
// that reports whether the command started.
constexpr int kLifelineFd = 3;
constexpr int kReportFd = 4;

// ---- The guard process (guard_main and its helpers): a fresh, single-threaded process. ----

void ignore_signal(int) {}

// SIGKILLs every child of this process (found by their parent in /proc/<pid>/stat); returns
// how many it found.
int kill_children() {
    const long self = ::getpid();
    DIR* proc = ::opendir("/proc");
    if (!proc) return 0;
    int found = 0;
    while (const dirent* entry = ::readdir(proc)) {
        char* end = nullptr;
        const long pid = std::strtol(entry->d_name, &end, 10);
        if (*end != '\0' || pid <= 0) continue;
        char path[64];
        std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        char stat[512];
        const ssize_t n = ::read(fd, stat, sizeof stat - 1);
        ::close(fd);
        if (n <= 0) continue;
        stat[n] = '\0';
        // "pid (comm) state ppid ...": comm may hold anything, so parse after its last ')'.
        const char* after = std::strrchr(stat, ')');
        char state = 0;
        long ppid = 0;
        if (!after || std::sscanf(after + 1, " %c %ld", &state, &ppid) != 2) continue;
        if (ppid != self) continue;
        ::kill(static_cast<pid_t>(pid), SIGKILL);
        ++found;
    }
    ::closedir(proc);
    return found;
}

// kiqd is gone: ends every descendant. Killing a child reparents its children to this
// subreaper, so kill, reap one, and look again, until no child is left.
[[noreturn]] void end_tree(pid_t command) {
    ::kill(command, SIGKILL);
    for (;;) {
        kill_children();
        int status = 0;
        if (::waitpid(-1, &status, 0) < 0 && errno == ECHILD) ::_exit(128 + SIGKILL);
    }
}

// Ends the way the command did: its exit status, or its signal (without a core file of the
// guard's own).
[[noreturn]] void exit_like(int status) {
    if (WIFEXITED(status)) ::_exit(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) {
        const int sig = WTERMSIG(status);
        struct rlimit none {};
        ::setrlimit(RLIMIT_CORE, &none);
        ::signal(sig, SIG_DFL);
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, sig);
        ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
        ::kill(::getpid(), sig);
    }
    ::_exit(127);
}

[[noreturn]] void guard_main(char** command, char** envp) {
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    ::prctl(PR_SET_NAME, "kiqd-exec-guard");
    ::fcntl(kLifelineFd, F_SETFD, FD_CLOEXEC);
    ::fcntl(kReportFd, F_SETFD, FD_CLOEXEC);
    // The group's SIGTERM (a timeout, a shutdown) is for the command; the guard ends when it
    // does. A handler, not SIG_IGN, which the command would inherit.
    struct sigaction handler {};
    handler.sa_handler = ignore_signal;
    ::sigaction(SIGTERM, &handler, nullptr);
    const pid_t guard = ::getpid();
    volatile int start_error = 0;
    const pid_t pid = ::vfork();
    if (pid == 0) {
        // The command: it dies with the guard too (a guard killed on its own), keeps the
        // guard's process group, and gets every signal unblocked at its default.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != guard) ::_exit(127);
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        ::execvpe(command[0], command, envp);
        start_error = errno;
        ::_exit(127);
    }
    const int error = pid < 0 ? errno : start_error;
    if (error != 0) {
        (void)!::write(kReportFd, &error, sizeof error);
        if (pid > 0) ::waitpid(pid, nullptr, 0);
        ::_exit(127);
    }
    ::close(kReportFd);  // EOF: started
#ifdef SYS_pidfd_open
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
    const int pidfd = -1;
#endif
    for (;;) {
        pollfd fds[2] = {{kLifelineFd, POLLIN, 0}, {pidfd, POLLIN, 0}};
        // Without a pidfd (old kernels) the command's exit is polled for.
        const int ready = ::poll(fds, pidfd >= 0 ? 2 : 1, pidfd >= 0 ? -1 : 50);
        if (ready > 0 && fds[0].revents != 0) end_tree(pid);  // EOF: kiqd is gone
        int status = 0;
        pid_t reaped;
        // Descendants reparented here are reaped too, as they end.
        while ((reaped = ::waitpid(-1, &status, WNOHANG)) > 0)
            if (reaped == pid) exit_like(status);
        if (reaped < 0 && errno == ECHILD) ::_exit(127);  // cannot happen: the command is ours
    }
}

// Runs before main in every program linked with kiqd (glibc passes argc, argv and envp to ELF
// constructors): in a process started as the guard, the guard runs and main never does.
__attribute__((constructor)) void exec_guard_entry(int argc, char** argv, char** envp) {
    if (argc >= 2 && argv && argv[0] && std::strcmp(argv[0], kGuardName) == 0)
        guard_main(argv + 1, envp);
}

// ---- kiqd's side. ----

// The lifeline: both ends close-on-exec, kept open for the process's life. Its read end goes to
// each guard as descriptor 3; its write end is never written, and closes only when kiqd ends.
// -1 when no pipe could be made (the commands then start unguarded).
int lifeline_read_end() {
    static const int read_end = [] {
        int p[2];
        if (::pipe2(p, O_CLOEXEC) != 0) return -1;
        return p[0];  // p[1], the write end, stays open (never closed) in kiqd alone
    }();
    return read_end;
}

std::atomic<bool> guard_unavailable{false};

}  // namespace

GuardedSpawn spawn_guarded(char* const argv[], char* const envp[], int stdin_fd, int stdout_fd,
                           int stderr_fd) {
    const int lifeline = lifeline_read_end();
    int report[2] = {-1, -1};
    if (lifeline < 0 || guard_unavailable.load(std::memory_order_relaxed) ||
        ::pipe2(report, O_CLOEXEC) != 0)
        return {spawn_child(argv, envp, stdin_fd, stdout_fd, stderr_fd), false};
    std::vector<char*> guard_argv{const_cast<char*>(kGuardName)};
    for (char* const* a = argv; *a; ++a) guard_argv.push_back(*a);
    guard_argv.push_back(nullptr);
    const SpawnedChild guard = spawn_child(guard_argv.data(), envp, stdin_fd, stdout_fd, stderr_fd,
                                           lifeline, report[1], "/proc/self/exe");
    ::close(report[1]);
    if (guard.error != 0) {
        // The guard itself could not start (no /proc?): from now on, commands start unguarded.
        ::close(report[0]);
        guard_unavailable.store(true, std::memory_order_relaxed);
        return {spawn_child(argv, envp, stdin_fd, stdout_fd, stderr_fd), false};
    }
    // The guard writes the command's start error, or closes the pipe once the command runs.
    int error = 0;
    ssize_t n;
    while ((n = ::read(report[0], &error, sizeof error)) < 0 && errno == EINTR) {
    }
    ::close(report[0]);
    if (n == static_cast<ssize_t>(sizeof error) && error != 0) {
        int status = 0;
        while (::waitpid(guard.pid, &status, 0) < 0 && errno == EINTR) {
        }
        return {{-1, error}, true};
    }
    return {guard, true};
}

}  // namespace kiqd
