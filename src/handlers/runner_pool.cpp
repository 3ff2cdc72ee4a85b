#include "handlers/runner_pool.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "handlers/child_spawn.hpp"
#include "handlers/runner_protocol.hpp"
#include "handlers/unique_fd.hpp"
#include "kiqd/deadline.hpp"

namespace kiqd {

using std::chrono::milliseconds;
using Clock = RunnerPool::Clock;

enum class ChildState { booting, idle, busy, stopping };

struct RunnerChild {
    size_t slot = 0;
    pid_t pid = -1;
    Fd sock, out, err, pidfd;
    ChildState state = ChildState::booting;
    bool leased = false;
    bool reaped = false;
    int status = 0;
    long long jobs = 0;
    Clock::time_point boot_deadline{}, term_at = Clock::time_point::max(),
                                       kill_at = Clock::time_point::max();
    bool term_sent = false, kill_sent = false;
    std::string out_partial, err_partial;
    std::deque<std::string> err_tail;
    runner::FrameReader boot_reader;
    std::string job_class, jid;
};

namespace {

constexpr size_t kTailLines = 20;
constexpr size_t kTailBytes = 4096;
constexpr size_t kMaxLine = 8192;
const milliseconds kRetireGrace{5000};  // end of file → SIGTERM, and SIGTERM → SIGKILL

milliseconds backoff(int failures) {
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

// Stops the child at once: SIGKILL now, and the supervisor's deadlines say so too.
void kill_now(RunnerChild& c) {
    c.state = ChildState::stopping;
    c.term_at = c.kill_at = Clock::now();
    signal_group(c, SIGKILL);
}

std::string tail_text(const std::deque<std::string>& tail) {
    if (tail.empty()) return "";
    return fmt::format("; stderr: {}", fmt::join(tail, "\n"));
}

// A started runner process: its pid and kiqd's ends of the socket and pipes.
struct Started {
    pid_t pid = -1;
    int error = 0;
    Fd sock, out, err;
};

Started spawn_runner(const RunnerSpec& spec, const std::vector<std::string>& env) {
    Started s;
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

// Reads what `fd` has (a bounded amount per call, so a flooding child cannot starve the others)
// and cuts it into lines; `line` gets each. False at end of file or on an error.
template <class OnLine>
bool read_lines(Fd& fd, std::string& partial, OnLine&& line) {
    char buf[16384];
    for (int reads = 0; reads < 8; ++reads) {
        const ssize_t n = ::read(fd.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return true;
        if (n <= 0) {
            if (!partial.empty()) line(std::exchange(partial, {}));
            fd.reset();
            return false;
        }
        partial.append(buf, static_cast<size_t>(n));
        size_t start = 0;
        for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
            std::string l = partial.substr(start, nl - start);
            if (!l.empty() && l.back() == '\r') l.pop_back();
            line(std::move(l));
        }
        partial.erase(0, start);
        while (partial.size() >= kMaxLine) {
            line(partial.substr(0, kMaxLine));
            partial.erase(0, kMaxLine);
        }
    }
    return true;
}

void keep_tail(std::deque<std::string>& tail, const std::string& line) {
    tail.push_back(line.size() > kTailBytes ? line.substr(line.size() - kTailBytes) : line);
    size_t bytes = 0;
    for (const auto& l : tail) bytes += l.size() + 1;
    while (tail.size() > 1 && (tail.size() > kTailLines || bytes > kTailBytes)) {
        bytes -= tail.front().size() + 1;
        tail.pop_front();
    }
}

}  // namespace

RunnerPool::RunnerPool(RunnerSpec spec, std::vector<std::string> env)
    : spec_(std::move(spec)), env_(std::move(env)) {
    slots_.resize(static_cast<size_t>(std::max(1, spec_.processes)));
}

RunnerPool::~RunnerPool() {
    stop();
}

void RunnerPool::start(spdlog::logger& log) {
    log_ = &log;
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    thread_ = std::thread([this] { supervise(); });
}

void RunnerPool::wake() {
    if (wake_fd_ >= 0) {
        const uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
    }
}

void RunnerPool::stop(milliseconds grace) {
    {
        std::lock_guard lock(mutex_);
        if (!stopping_) {
            stopping_ = true;
            const auto now = Clock::now();
            for (auto& slot : slots_) {
                if (!slot.child || slot.child->reaped) continue;
                auto& c = *slot.child;
                c.state = ChildState::stopping;
                ::shutdown(c.sock.get(), SHUT_RDWR);
                c.term_at = now;
                c.kill_at = saturating_deadline(now, grace);
            }
        }
    }
    idle_cv_.notify_all();
    wake();
    if (thread_.joinable()) thread_.join();
    if (wake_fd_ >= 0) ::close(wake_fd_);
    wake_fd_ = -1;
}

void RunnerPool::start_child(Slot& slot) {
    Started s = spawn_runner(spec_, env_);
    if (s.error != 0) {
        slot.child.reset();
        boot_failed(slot,
                    fmt::format("cannot start {}: {}", spec_.argv[0], std::strerror(s.error)));
        return;
    }
    auto c = std::make_shared<RunnerChild>();
    c->slot = static_cast<size_t>(&slot - slots_.data());
    c->pid = s.pid;
    c->sock = std::move(s.sock);
    c->out = std::move(s.out);
    c->err = std::move(s.err);
    c->pidfd = Fd(open_pidfd(s.pid));
    c->boot_deadline = saturating_deadline(Clock::now(), spec_.boot_timeout);
    slot.child = std::move(c);
    log_->debug("runner={} started pid {}: {}", spec_.name, s.pid, fmt::join(spec_.argv, " "));
}

void RunnerPool::note_failure(Slot& slot) {
    ++slot.failures;
    slot.start_at = saturating_deadline(Clock::now(), backoff(slot.failures));
}

void RunnerPool::boot_failed(Slot& slot, const std::string& why) {
    note_failure(slot);
    const std::string text = fmt::format("runner={} did not boot: {} (retrying in {} s)",
                                         spec_.name, why, backoff(slot.failures).count() / 1000);
    // Once per streak: a command that cannot boot would otherwise log every few seconds.
    if (!boot_reported_) {
        boot_reported_ = true;
        log_->error("{}", text);
    } else {
        log_->debug("{}", text);
    }
}

void RunnerPool::retire(RunnerChild& c, const char* why) {
    log_->info("runner={} pid={} recycled after {} job(s): {}", spec_.name, c.pid, c.jobs, why);
    c.state = ChildState::stopping;
    ::shutdown(c.sock.get(), SHUT_RDWR);  // the runner sees end of file and exits
    const auto now = Clock::now();
    c.term_at = now + kRetireGrace;
    c.kill_at = now + 2 * kRetireGrace;
}

void RunnerPool::log_output(RunnerChild& c, bool is_err) {
    Fd& fd = is_err ? c.err : c.out;
    if (!fd.open()) return;
    read_lines(fd, is_err ? c.err_partial : c.out_partial, [&](std::string line) {
        const char* stream = is_err ? "stderr" : "stdout";
        if (c.state == ChildState::busy)
            log_->info("class={} jid={} runner={} pid={} {}: {}", c.job_class, c.jid, spec_.name,
                       c.pid, stream, line);
        else
            log_->info("runner={} pid={} {}: {}", spec_.name, c.pid, stream, line);
        if (is_err) keep_tail(c.err_tail, line);
    });
}

bool RunnerPool::reap(Slot& slot) {
    auto& c = *slot.child;
    if (c.reaped) return true;
    int status = 0;
    if (::waitpid(c.pid, &status, WNOHANG) != c.pid) return false;
    c.reaped = true;
    c.status = status;
    c.pidfd.reset();
    // What it wrote last, then the pipes are closed: descendants that keep them open are not
    // waited for, and they die with the group below.
    log_output(c, false);
    log_output(c, true);
    c.out.reset();
    c.err.reset();
    ::kill(-c.pid, SIGKILL);
    reaped_cv_.notify_all();
    if (c.state == ChildState::booting) {
        c.state = ChildState::stopping;
        boot_failed(slot, fmt::format("pid {} {} before it was ready{}", c.pid,
                                      describe_wait_status(status), tail_text(c.err_tail)));
    } else if (c.state == ChildState::idle) {
        note_failure(slot);
        log_->warn("runner={} pid={} {} while idle{}", spec_.name, c.pid,
                   describe_wait_status(status), tail_text(c.err_tail));
        c.state = ChildState::stopping;
    }
    return true;
}

void RunnerPool::supervise() noexcept {
    const std::string name = ("runner-" + spec_.name).substr(0, 15);
    ::pthread_setname_np(::pthread_self(), name.c_str());
    std::vector<pollfd> fds;
    struct Ref {
        size_t slot;
        int what;  // 0 out, 1 err, 2 pidfd, 3 sock
    };
    std::vector<Ref> refs;
    for (;;) {
        std::unique_lock lock(mutex_);
        const auto now = Clock::now();
        bool all_gone = true;
        auto next = now + milliseconds(1000);
        for (auto& slot : slots_) {
            // A reaped child's slot frees up once its leaseholder (if any) has let it go.
            if (slot.child && slot.child->reaped && !slot.child->leased) slot.child.reset();
            if (!slot.child && !stopping_) {
                if (now >= slot.start_at)
                    start_child(slot);
                else
                    next = std::min(next, slot.start_at);
            }
            if (!slot.child) continue;
            auto& c = *slot.child;
            if (!c.reaped) all_gone = false;
            if (c.state == ChildState::booting && now >= c.boot_deadline) {
                signal_group(c, SIGKILL);
                c.state = ChildState::stopping;
                boot_failed(
                    slot, fmt::format("pid {} sent no ready within {} s{}", c.pid,
                                      spec_.boot_timeout.count() / 1000.0, tail_text(c.err_tail)));
            }
            if (c.state == ChildState::stopping && !c.reaped) {
                if (!c.term_sent && now >= c.term_at) {
                    signal_group(c, SIGTERM);
                    c.term_sent = true;
                }
                if (now >= c.kill_at) signal_group(c, SIGKILL);
            }
            if (c.state == ChildState::booting) next = std::min(next, c.boot_deadline);
            if (!c.term_sent) next = std::min(next, c.term_at);
            next = std::min(next, c.kill_at);
        }
        if (stopping_ && all_gone) {
            // Everything is reaped; release what is left.
            for (auto& slot : slots_)
                if (slot.child && !slot.child->leased) slot.child.reset();
            return;
        }
        fds.clear();
        refs.clear();
        fds.push_back({wake_fd_, POLLIN, 0});
        refs.push_back({0, -1});
        for (size_t i = 0; i < slots_.size(); ++i) {
            auto& c = slots_[i].child;
            if (!c) continue;
            if (c->out.open()) fds.push_back({c->out.get(), POLLIN, 0}), refs.push_back({i, 0});
            if (c->err.open()) fds.push_back({c->err.get(), POLLIN, 0}), refs.push_back({i, 1});
            if (c->pidfd.open()) fds.push_back({c->pidfd.get(), POLLIN, 0}), refs.push_back({i, 2});
            if (!c->leased && (c->state == ChildState::booting || c->state == ChildState::idle))
                fds.push_back({c->sock.get(), POLLIN, 0}), refs.push_back({i, 3});
        }
        const auto wait = std::chrono::duration_cast<milliseconds>(next - Clock::now()).count() + 1;
        lock.unlock();
        // Without pidfds (old kernels) the loop reaps on a short tick instead.
        const int timeout = static_cast<int>(std::clamp<long long>(wait, 1, 250));
        ::poll(fds.data(), fds.size(), timeout);
        lock.lock();
        if (fds[0].revents) {
            uint64_t n;
            [[maybe_unused]] const ssize_t r = ::read(wake_fd_, &n, sizeof n);
        }
        for (size_t k = 1; k < fds.size(); ++k) {
            if (!fds[k].revents) continue;
            auto& slot = slots_[refs[k].slot];
            if (!slot.child) continue;
            auto& c = *slot.child;
            switch (refs[k].what) {
                case 0:
                case 1:
                    if ((refs[k].what == 1 ? c.err : c.out).get() == fds[k].fd)
                        log_output(c, refs[k].what == 1);
                    break;
                case 2:
                    break;  // reaped below
                case 3: {
                    if (c.leased || c.sock.get() != fds[k].fd) break;
                    if (c.state == ChildState::idle) {
                        // The event may be stale: a leaseholder that took the child after the
                        // poll read its reply and gave it back since. Only what is there now
                        // counts.
                        pollfd now_fd{c.sock.get(), POLLIN, 0};
                        if (::poll(&now_fd, 1, 0) <= 0) break;
                        // An idle runner has nothing to say: it is exiting or confused.
                        log_->warn(
                            "runner={} pid={} wrote or closed its socket while idle: "
                            "replacing it",
                            spec_.name, c.pid);
                        note_failure(slot);
                        kill_now(c);
                        break;
                    }
                    if (c.state != ChildState::booting) break;
                    char buf[4096];
                    const ssize_t n = ::read(c.sock.get(), buf, sizeof buf);
                    if (n > 0) c.boot_reader.feed(buf, static_cast<size_t>(n));
                    std::string error;
                    if (auto frame = c.boot_reader.next()) {
                        if (auto ready = runner::parse_ready(*frame, error)) {
                            c.state = ChildState::idle;
                            if (boot_reported_ || slot.failures > 0)
                                log_->info("runner={} pid={} booted after {} failure(s)",
                                           spec_.name, c.pid, slot.failures);
                            boot_reported_ = false;
                            log_->info("runner={} pid={} ready ({})", spec_.name, c.pid,
                                       ready->runner);
                            idle_cv_.notify_one();
                            break;
                        }
                    } else if (c.boot_reader.malformed()) {
                        error = c.boot_reader.error();
                    } else if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                        // End of file: usually the process exited, which reap reports with its
                        // status; a process that only closed the socket is stopped here.
                        for (int i = 0; i < 20 && !reap(slot); ++i) ::usleep(10 * 1000);
                        if (!c.reaped) error = "nothing (it closed its socket)";
                    }
                    if (!error.empty()) {
                        signal_group(c, SIGKILL);
                        c.state = ChildState::stopping;
                        boot_failed(slot, fmt::format("pid {} sent {}{}", c.pid, error,
                                                      tail_text(c.err_tail)));
                    }
                    break;
                }
            }
        }
        for (auto& slot : slots_)
            if (slot.child) reap(slot);
    }
}

std::optional<RunnerLease> RunnerPool::acquire(const StopSignal& stop) {
    std::unique_lock lock(mutex_);
    for (;;) {
        if (stopping_ || stop.stop_requested()) return std::nullopt;
        for (auto& slot : slots_) {
            auto& c = slot.child;
            if (c && !c->leased && !c->reaped && c->state == ChildState::idle) {
                c->state = ChildState::busy;
                c->leased = true;
                return RunnerLease{c, c->sock.get(), c->pid};
            }
        }
        // The stop signal has its own condition variable: look at it every 100 ms.
        idle_cv_.wait_for(lock, milliseconds(100));
    }
}

void RunnerPool::set_job(const RunnerLease& lease, std::string job_class, std::string jid) {
    std::lock_guard lock(mutex_);
    lease.child->job_class = std::move(job_class);
    lease.child->jid = std::move(jid);
}

void RunnerPool::release(RunnerLease& lease, RunnerRelease how) {
    if (!lease.child) return;
    // /proc is read before the lock: the supervisor and other leaseholders need not wait for it.
    // Only the lease's child is measured, and only when it may go on (it is not broken).
    const long long rss =
        spec_.max_rss_mb > 0 && how != RunnerRelease::broken ? rss_bytes(lease.pid) : 0;
    {
        std::lock_guard lock(mutex_);
        auto& c = *lease.child;
        auto& slot = slots_[c.slot];
        c.leased = false;
        c.job_class.clear();
        c.jid.clear();
        if (how == RunnerRelease::broken || c.reaped) {
            note_failure(slot);
            kill_now(c);
        } else {
            ++c.jobs;
            slot.failures = 0;
            c.state = ChildState::idle;
            if (stopping_) {
                retire(c, "kiqd is stopping");
            } else if (spec_.max_jobs > 0 && c.jobs >= spec_.max_jobs) {
                retire(c, fmt::format("max_jobs {}", spec_.max_jobs).c_str());
            } else if (spec_.max_rss_mb > 0 && rss > spec_.max_rss_mb * 1024 * 1024) {
                retire(c, fmt::format("RSS {} MB above max_rss_mb {}", rss / (1024 * 1024),
                                      spec_.max_rss_mb)
                              .c_str());
            }
        }
    }
    lease.child.reset();
    idle_cv_.notify_one();
    wake();
}

void RunnerPool::signal(const RunnerLease& lease, int sig) {
    std::lock_guard lock(mutex_);
    signal_group(*lease.child, sig);
}

std::optional<int> RunnerPool::wait_reaped(const RunnerLease& lease, Clock::time_point until) {
    std::unique_lock lock(mutex_);
    wake();
    if (!reaped_cv_.wait_until(lock, until, [&] { return lease.child->reaped; }))
        return std::nullopt;
    return lease.child->status;
}

std::string RunnerPool::stderr_tail(const RunnerLease& lease) {
    std::lock_guard lock(mutex_);
    return tail_text(lease.child->err_tail);
}

std::vector<RunnerChildInfo> RunnerPool::snapshot() const {
    std::lock_guard lock(mutex_);
    std::vector<RunnerChildInfo> out;
    for (const auto& slot : slots_) {
        if (!slot.child || slot.child->reaped) continue;
        const auto& c = *slot.child;
        static constexpr const char* kState[] = {"booting", "idle", "busy", "stopping"};
        out.push_back({spec_.name, c.pid, kState[static_cast<int>(c.state)], c.jobs,
                       rss_bytes(c.pid), c.job_class, c.jid});
    }
    return out;
}

std::optional<std::string> RunnerPool::boot_once(const RunnerSpec& spec,
                                                 const std::vector<std::string>& env) {
    Started s = spawn_runner(spec, env);
    if (s.error != 0)
        return fmt::format("cannot start {}: {}", spec.argv[0], std::strerror(s.error));
    const auto deadline = saturating_deadline(Clock::now(), spec.boot_timeout);
    runner::FrameReader reader;
    std::deque<std::string> tail;
    std::string partial;
    std::optional<std::string> problem;
    bool done = false;
    while (!done) {
        const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) {
            problem = fmt::format("sent no ready within {} s", spec.boot_timeout.count() / 1000.0);
            break;
        }
        pollfd fds[2] = {{s.sock.get(), POLLIN, 0}, {s.err.get(), POLLIN, 0}};
        ::poll(fds, s.err.open() ? 2 : 1, static_cast<int>(std::min<long long>(left, 1000)));
        if (s.err.open() && fds[1].revents)
            read_lines(s.err, partial, [&](std::string l) { keep_tail(tail, l); });
        if (!fds[0].revents) continue;
        char buf[4096];
        const ssize_t n = ::read(s.sock.get(), buf, sizeof buf);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            problem = "exited (or closed its socket) before it was ready";
            break;
        }
        if (n > 0) reader.feed(buf, static_cast<size_t>(n));
        std::string error;
        if (auto frame = reader.next()) {
            if (!runner::parse_ready(*frame, error)) problem = "sent " + error;
            done = true;
        } else if (reader.malformed()) {
            problem = "sent " + reader.error();
            done = true;
        }
    }
    ::shutdown(s.sock.get(), SHUT_RDWR);
    ::kill(-s.pid, SIGTERM);
    int status = 0;
    for (int i = 0; i < 50 && ::waitpid(s.pid, &status, WNOHANG) == 0; ++i) ::usleep(100 * 1000);
    if (::waitpid(s.pid, &status, WNOHANG) == 0) {
        ::kill(-s.pid, SIGKILL);
        while (::waitpid(s.pid, &status, 0) < 0 && errno == EINTR) {
        }
    }
    if (problem) {
        while (s.err.open() &&
               read_lines(s.err, partial, [&](std::string l) { keep_tail(tail, l); })) {
            pollfd p{s.err.get(), POLLIN, 0};
            if (::poll(&p, 1, 200) <= 0) break;
        }
        *problem += tail_text(tail);
    }
    return problem;
}

}  // namespace kiqd
