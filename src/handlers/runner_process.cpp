// One runner process's lifecycle (runner_process.hpp): starting, signalling, measuring, and
// the socket's outbox. Called with the pool's mutex held, except spawn_runner and the helpers
// check-config's boot uses on its own thread.
#include "handlers/runner_process.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "handlers/child_spawn.hpp"

namespace kiqd {
RunnerChild::RunnerChild(spdlog::logger* log)
    : out_lines("stdout", kRunnerMaxLine, log),
      err_lines("stderr", kRunnerMaxLine, log, &err_tail, kRunnerTailLines, kRunnerTailBytes) {}

std::string RunnerChild::current_job_class() const {
    return seats.size() == 1 ? seats.begin()->second->job_class : std::string();
}

std::string RunnerChild::current_jid() const {
    return seats.size() == 1 ? seats.begin()->second->jid : std::string();
}

std::chrono::milliseconds restart_backoff(int failures) {
    using std::chrono::milliseconds;
    if (failures <= 0) return milliseconds(0);
    return std::min(milliseconds(60000), milliseconds(1000L << std::min(failures - 1, 6)));
}

long long rss_bytes(pid_t pid) {
    std::ifstream statm("/proc/" + std::to_string(pid) + "/statm");
    long long size = 0, resident = 0;
    if (!(statm >> size >> resident)) return 0;
    return resident * ::sysconf(_SC_PAGESIZE);
}

void signal_group(RunnerChild& c, int sig) {
    if (c.reaped || c.pid <= 0) return;
    if (::kill(-c.pid, sig) != 0) ::kill(c.pid, sig);
}

void kill_now(RunnerChild& c) {
    c.state = ChildState::stopping;
    c.term_at = c.kill_at = RunnerClock::now();
    signal_group(c, SIGKILL);
}

std::string tail_text(const std::deque<std::string>& tail) {
    if (tail.empty()) return "";
    return fmt::format("; stderr: {}", fmt::join(tail, "\n"));
}

StartedRunner spawn_runner(const RunnerSpec& spec, const std::vector<std::string>& env,
                           bool preload) {
    StartedRunner s;
    int sv[2], po[2], pe[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        s.error = errno;
        return s;
    }
    Fd mine(sv[0]), theirs(sv[1]);
    if (::pipe2(po, O_CLOEXEC) != 0 || ::pipe2(pe, O_CLOEXEC) != 0) {
        s.error = errno;
        return s;
    }
    Fd out_r(po[0]), out_w(po[1]), err_r(pe[0]), err_w(pe[1]);
    Fd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    std::vector<std::string> envs = env;
    envs.push_back("KIQD_RUNNER_FD=3");
    envs.push_back("KIQD_RUNNER_NAME=" + spec.name);
    envs.push_back("KIQD_RUNNER_THREADS=" + std::to_string(std::max(1, spec.threads)));
    // This kiqd answers a `fail` that carries a retry decision (docs/runner-protocol.md).
    envs.push_back("KIQD_RUNNER_DECISIONS=1");
    if (preload) envs.push_back("KIQD_RUNNER_PRELOAD=1");
    std::vector<char*> envp, argv;
    for (auto& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = spec.argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const SpawnedChild child = spawn_child(argv.data(), envp.data(), devnull.get(), out_w.get(),
                                           err_w.get(), theirs.get());
    if (child.error != 0) {
        s.error = child.error;
        return s;
    }
    for (int fd : {mine.get(), out_r.get(), err_r.get()}) set_nonblocking(fd);
    s.pid = child.pid;
    s.sock = std::move(mine);
    s.out = std::move(out_r);
    s.err = std::move(err_r);
    return s;
}

bool send_with_fds(int sock, const std::string& frame, const std::vector<int>& fds) {
    iovec iov{const_cast<char*>(frame.data()), frame.size()};
    std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()), 0);
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
    ssize_t n;
    while ((n = ::sendmsg(sock, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
    }
    return n == static_cast<ssize_t>(frame.size());
}

bool give_seat_sockets(RunnerChild& c) {
    // SCM_RIGHTS carries at most 253 descriptors a message: several `seats` frames for more.
    constexpr size_t kPerFrame = 250;
    std::vector<Fd> mine, theirs;
    for (int i = 0; i < c.capacity; ++i) {
        int sv[2];
        if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return false;
        mine.emplace_back(sv[0]);
        theirs.emplace_back(sv[1]);
        ::fcntl(sv[0], F_SETFL, ::fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    }
    for (size_t from = 0; from < theirs.size(); from += kPerFrame) {
        std::vector<int> fds;
        for (size_t i = from; i < std::min(theirs.size(), from + kPerFrame); ++i)
            fds.push_back(theirs[i].get());
        const auto frame =
            runner::encode_frame("seats", fmt::format(R"({{"count":{}}})", fds.size()));
        if (!send_with_fds(c.sock.get(), frame, fds)) {
            // A runner left with part of its seats cannot be served as one without: it goes.
            if (from > 0) kill_now(c);
            return false;
        }
    }
    c.seat_socks = std::move(mine);
    c.seat_taken.assign(c.seat_socks.size(), false);
    return true;
}

void close_sockets(RunnerChild& c) {
    ::shutdown(c.sock.get(), SHUT_RDWR);
    for (auto& s : c.seat_socks) ::shutdown(s.get(), SHUT_RDWR);
}

bool process_gone(const RunnerChild& c) {
    if (c.pid <= 0) return true;
    if (c.pidfd.open()) {
        pollfd p{c.pidfd.get(), POLLIN, 0};
        return ::poll(&p, 1, 0) > 0;
    }
    return ::kill(c.pid, 0) != 0 && errno == ESRCH;
}

bool read_into(Fd& fd, LineSink& sink, const LineLabels& labels) {
    char buf[16384];
    for (int reads = 0; reads < 8; ++reads) {
        const ssize_t n = ::read(fd.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return true;
        if (n <= 0) {
            sink.finish(labels);
            fd.reset();
            return false;
        }
        sink.feed(buf, static_cast<size_t>(n), labels);
    }
    return true;
}

bool flush_outbox(RunnerChild& c) {
    while (c.outbox_sent < c.outbox.size()) {
        const ssize_t w = ::send(c.sock.get(), c.outbox.data() + c.outbox_sent,
                                 c.outbox.size() - c.outbox_sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            c.outbox_sent += static_cast<size_t>(w);
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        return false;  // full (EAGAIN) or broken: the reader's poll sees which
    }
    c.outbox.clear();
    c.outbox_sent = 0;
    return true;
}

bool queue_frame(RunnerChild& c, const std::string& frame) {
    if (c.outbox.empty()) {
        // The usual case: the frame fits the socket's buffer and is never copied.
        size_t sent = 0;
        while (sent < frame.size()) {
            const ssize_t w = ::send(c.sock.get(), frame.data() + sent, frame.size() - sent,
                                     MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0) {
                sent += static_cast<size_t>(w);
            } else if (w < 0 && errno == EINTR) {
                continue;
            } else {
                if (w < 0 && errno != EAGAIN) return false;
                break;
            }
        }
        if (sent == frame.size()) return true;
        c.outbox.assign(frame, sent);
        return true;
    }
    c.outbox.append(frame);
    flush_outbox(c);
    return true;
}

}  // namespace kiqd
