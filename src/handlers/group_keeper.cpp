#include "handlers/group_keeper.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <set>
#include <vector>

#include "handlers/child_spawn.hpp"

extern char** environ;

namespace kiqd {
namespace {

// The keeper as kiqd sees it: its pid, kiqd's end of the socket, and the groups registered.
struct KeeperState {
    std::mutex mutex;
    pid_t pid = -1;
    int socket = -1;
    std::set<pid_t> groups;
};
KeeperState& keeper_state() {
    static auto* state = new KeeperState;  // never destroyed: spawns may run until _Exit
    return *state;
}

// False when the keeper is gone (its end is closed).
bool send_record(int socket, pid_t record) {
    ssize_t n;
    while ((n = ::send(socket, &record, sizeof record, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
    }
    return n == sizeof record;
}

// Starts the keeper: kiqd's binary again with kGroupKeeperArg, the other end of the socket as
// its descriptor 3, /dev/null as 0-2, a session of its own (no terminal's signals), default
// signals and none blocked. Called with the state's mutex held.
bool start_keeper(KeeperState& state) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return false;
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    ::posix_spawn_file_actions_init(&actions);
    ::posix_spawnattr_init(&attr);
    for (int fd = 0; fd < 3; ++fd)
        ::posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", O_RDWR, 0);
    ::posix_spawn_file_actions_adddup2(&actions, sv[1], 3);
    sigset_t all, none;
    sigfillset(&all);
    sigemptyset(&none);
    ::posix_spawnattr_setsigdefault(&attr, &all);
    ::posix_spawnattr_setsigmask(&attr, &none);
    ::posix_spawnattr_setflags(&attr,
                               POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    char name[] = "kiqd-keeper";
    char arg[64];
    std::snprintf(arg, sizeof arg, "%s", kGroupKeeperArg);
    char* argv[] = {name, arg, nullptr};
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, "/proc/self/exe", &actions, &attr, argv, environ);
    ::posix_spawn_file_actions_destroy(&actions);
    ::posix_spawnattr_destroy(&attr);
    ::close(sv[1]);
    if (rc != 0) {
        ::close(sv[0]);
        return false;
    }
    state.pid = pid;
    if (state.socket < 0) {
        state.socket = sv[0];
    } else {
        // A restarted keeper takes over the same descriptor number: a child between vfork and
        // exec may be sending on it right now, and a number closed and reused meanwhile would
        // get its record (a Redis connection, say).
        ::dup3(sv[0], state.socket, O_CLOEXEC);
        ::close(sv[0]);
        // It learns the groups its predecessor knew.
        for (pid_t group : state.groups) send_record(state.socket, group);
    }
    return true;
}

// A keeper that died since the last look is reaped and replaced. Called with the mutex held.
void replace_dead_keeper(KeeperState& state) {
    if (state.pid <= 0) return;
    int status = 0;
    if (::waitpid(state.pid, &status, WNOHANG) != state.pid) return;
    state.pid = -1;  // killed, out of memory: another takes over the same descriptor
    start_keeper(state);
}

}  // namespace

int process_group_keeper() {
    auto& state = keeper_state();
    std::lock_guard lock(state.mutex);
    replace_dead_keeper(state);
    if (state.pid <= 0) start_keeper(state);
    return state.pid > 0 ? state.socket : -1;
}

void keep_process_group(pid_t group) {
    auto& state = keeper_state();
    std::lock_guard lock(state.mutex);
    state.groups.insert(group);
    // Again from kiqd (the child's own record may have gone to a keeper that has since died;
    // a group registered twice is registered once). A keeper found gone here is replaced at
    // once, not at the next spawn: its successor is given every group, this one included.
    if (state.socket >= 0 && !send_record(state.socket, group)) {
        const pid_t gone = state.pid;
        // Its exit may lag its closed socket by a moment: up to 100 ms.
        for (int i = 0; i < 100 && gone > 0 && state.pid == gone; ++i) {
            replace_dead_keeper(state);
            if (state.pid == gone) ::usleep(1000);
        }
    }
}

void release_process_group(pid_t group) {
    auto& state = keeper_state();
    std::lock_guard lock(state.mutex);
    state.groups.erase(group);
    if (state.socket >= 0) send_record(state.socket, -group);
}

void run_group_keeper() {
    ::prctl(PR_SET_NAME, "kiqd-keeper", 0, 0, 0);
    // It must outlive kiqd by the moment it needs: stop signals meant for kiqd (a Ctrl-C reaches
    // the terminal's foreground group, a service manager may signal the whole group) are not
    // for it. It ends when kiqd's end of the socket closes.
    for (int sig :
         {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2, SIGTSTP, SIGTTIN, SIGTTOU})
        ::signal(sig, SIG_IGN);
    close_descriptors_from(4);
    if (::chdir("/") != 0) {
        // Nothing depends on the working directory; it only should not keep a mount busy.
    }
    // One bit per possible pid (PID_MAX_LIMIT on 64-bit Linux): 512 KB, touched sparsely.
    constexpr pid_t kPidLimit = 1 << 22;
    std::vector<uint64_t> registered(kPidLimit / 64);
    for (;;) {
        pid_t record = 0;
        const ssize_t n = ::recv(3, &record, sizeof record, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;  // end of file: kiqd is gone (an error means the same)
        if (n != sizeof record || record == 0) continue;
        const pid_t group = record > 0 ? record : -record;
        if (group >= kPidLimit) continue;
        const uint64_t bit = uint64_t{1} << (group % 64);
        if (record > 0)
            registered[group / 64] |= bit;
        else
            registered[group / 64] &= ~bit;
    }
    for (pid_t word = 0; word < kPidLimit / 64; ++word) {
        for (uint64_t bits = registered[word]; bits != 0; bits &= bits - 1)
            ::kill(-(word * 64 + __builtin_ctzll(bits)), SIGKILL);
    }
    ::_exit(0);
}

}  // namespace kiqd
