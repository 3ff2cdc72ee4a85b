// The supervisor side of a runner pool (runner_pool.hpp): starting, forking, booting, reaping,
// recycling and stopping its processes. The processor threads' side, seats and the exchange of
// frames, is runner_pool_leases.cpp.
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
#include <nlohmann/json.hpp>

#include "handlers/child_output.hpp"
#include "handlers/child_spawn.hpp"
#include "handlers/group_keeper.hpp"
#include "handlers/runner_process.hpp"
#include "handlers/runner_protocol.hpp"
#include "handlers/unique_fd.hpp"
#include "kiqd/deadline.hpp"

namespace kiqd {

using std::chrono::milliseconds;
using Clock = RunnerPool::Clock;

namespace {
const milliseconds kRetireGrace{5000};  // end of file → SIGTERM, and SIGTERM → SIGKILL
}  // namespace

void RunnerPool::take_seats_from(RunnerChild& c, const runner::Ready& ready) {
    c.tagged = ready.threads > 0;
    c.capacity = c.tagged ? std::min(ready.threads, std::max(1, spec_.threads)) : 1;
    // Seat sockets: a job's frame and its answer travel on a socket of their own, so the thread
    // that sent the job reads its answer itself (runner_pool_leases.cpp). A runner that got none
    // is served on its one socket, as one that never asked.
    if (ready.seat_sockets && !give_seat_sockets(c))
        log_->warn(
            "runner={} pid={} asked for seat sockets, which could not be given ({}): its jobs "
            "go over its one socket",
            spec_.name, c.pid, std::strerror(errno));
    note_first_boot(&ready.app);
}

void RunnerPool::note_first_boot(const runner::AppSettings* app) {
    if (app && !app_settings_) app_settings_ = *app;
    if (!first_boot_ended_) {
        first_boot_ended_ = true;
        first_boot_cv_.notify_all();
    }
}

std::optional<runner::AppSettings> RunnerPool::app_settings() const {
    std::lock_guard lock(mutex_);
    return app_settings_;
}

std::optional<runner::AppSettings> RunnerPool::await_app_settings(Clock::time_point until) const {
    std::unique_lock lock(mutex_);
    first_boot_cv_.wait_until(lock, until, [&] { return first_boot_ended_ || stopping_; });
    return app_settings_;
}

RunnerPool::RunnerPool(RunnerSpec spec, std::vector<std::string> env)
    : spec_(std::move(spec)), env_(std::move(env)) {
    slots_.resize(static_cast<size_t>(std::max(1, spec_.processes)));
    mode_ = Mode::probe;
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
            first_boot_cv_.notify_all();
            const auto now = Clock::now();
            for (auto& slot : slots_) {
                if (!slot.child || slot.child->reaped) continue;
                auto& c = *slot.child;
                c.state = ChildState::stopping;
                close_sockets(c);
                c.term_at = now;
                c.kill_at = saturating_deadline(now, grace);
            }
        }
    }
    {
        std::lock_guard lock(mutex_);
        for (auto* w : waiters_) w->seat->cv.notify_one();
    }
    wake();
    if (thread_.joinable()) thread_.join();
    if (wake_fd_ >= 0) ::close(wake_fd_);
    wake_fd_ = -1;
}

void RunnerPool::start_child(Slot& slot) {
    const bool is_master = &slot == &master_;
    if (!is_master && mode_ == Mode::fork) return fork_child(slot);
    if (is_master) ++master_gen_;
    StartedRunner s = spawn_runner(spec_, env_, is_master && spec_.preload);
    if (s.error != 0) {
        slot.child.reset();
        boot_failed(slot,
                    fmt::format("cannot start {}: {}", spec_.argv[0], std::strerror(s.error)));
        return;
    }
    auto c = std::make_shared<RunnerChild>(log_);
    c->slot = is_master ? kMaster : static_cast<size_t>(&slot - slots_.data());
    c->pid = s.pid;
    c->sock = std::move(s.sock);
    c->out = std::move(s.out);
    c->err = std::move(s.err);
    c->pidfd = Fd(open_pidfd(s.pid));
    c->boot_deadline = saturating_deadline(Clock::now(), spec_.boot_timeout);
    slot.child = std::move(c);
    log_->debug("runner={} started {}pid {}: {}", spec_.name, is_master ? "master " : "", s.pid,
                fmt::join(spec_.argv, " "));
}

void RunnerPool::fork_child(Slot& slot) {
    auto& m = *master_.child;
    const size_t index = static_cast<size_t>(&slot - slots_.data());
    int sv[2], po[2] = {-1, -1}, pe[2] = {-1, -1};
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        note_failure(slot);
        return;
    }
    Fd mine(sv[0]), theirs(sv[1]);
    const bool piped = ::pipe2(po, O_CLOEXEC) == 0 && ::pipe2(pe, O_CLOEXEC) == 0;
    Fd out_r(po[0]), out_w(po[1]), err_r(pe[0]), err_w(pe[1]);
    if (!piped) {
        note_failure(slot);
        return;
    }
    // kiqd's copies of the child's ends are closed once sent: the child (and, until it forks,
    // the master) holds the only ones, so their end of file is the child's.
    if (!send_with_fds(m.sock.get(),
                       runner::encode_frame("fork", fmt::format("{{\"slot\":{}}}", index)),
                       {theirs.get(), out_w.get(), err_w.get()})) {
        log_->warn("runner={} master pid={} does not take fork requests ({}): replacing it",
                   spec_.name, m.pid, std::strerror(errno));
        note_failure(master_);
        kill_now(m);
        return;
    }
    for (int fd : {mine.get(), out_r.get(), err_r.get()}) set_nonblocking(fd);
    auto c = std::make_shared<RunnerChild>(log_);
    c->slot = index;
    c->forked = true;
    c->master_gen = master_gen_;
    c->sock = std::move(mine);
    c->out = std::move(out_r);
    c->err = std::move(err_r);
    c->boot_deadline = saturating_deadline(Clock::now(), spec_.boot_timeout);
    slot.child = std::move(c);
}

void RunnerPool::master_ready(const runner::Ready& ready) {
    auto& m = master_.child;
    note_first_boot(&ready.app);  // a preloading master has booted the app: its settings count
    if (ready.preload) {
        mode_ = Mode::fork;
        m->state = ChildState::idle;
        master_.failures = 0;
        log_->info("runner={} master pid={} booted ({}): forking {} process(es)", spec_.name,
                   m->pid, ready.runner, slots_.size());
        return;
    }
    // Not a preloading runner: it is the first process, and the others start as it did.
    mode_ = Mode::direct;
    log_->info("runner={} pid={} ready ({}); it does not preload: processes start one by one",
               spec_.name, m->pid, ready.runner);
    if (slots_[0].child) {
        kill_now(*m);
        return;
    }
    m->slot = 0;
    m->state = ChildState::idle;
    take_seats_from(*m, ready);
    slots_[0].child = std::move(m);
    hand_off_idle();
}

bool RunnerPool::master_alive_for(const RunnerChild& c) const {
    return master_.child && !master_.child->reaped && c.master_gen == master_gen_;
}

void RunnerPool::master_frames() {
    auto& m = *master_.child;
    char buf[4096];
    bool eof = false;
    for (;;) {
        const ssize_t n = ::read(m.sock.get(), buf, sizeof buf);
        if (n > 0) {
            m.boot_reader.feed(buf, static_cast<size_t>(n));
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        eof = !(n < 0 && errno == EAGAIN);
        break;
    }
    std::string problem;
    while (auto frame = m.boot_reader.next()) {
        const auto j = nlohmann::json::parse(frame->data, nullptr, false);
        const long long pid = j.is_object() ? j.value("pid", 0LL) : 0;
        if (frame->type == "forked" && j.is_object() && pid > 0) {
            const auto index = j.value("slot", static_cast<size_t>(-1));
            if (index >= slots_.size()) continue;
            auto& c = slots_[index].child;
            if (!c || !c->forked || c->pid > 0 || c->master_gen != master_gen_) continue;
            c->pid = static_cast<pid_t>(pid);
            c->pidfd = Fd(open_pidfd(c->pid));
            log_->debug("runner={} master pid={} forked pid {}", spec_.name, m.pid, pid);
        } else if (frame->type == "exited" && j.is_object() && pid > 0) {
            for (auto& slot : slots_) {
                auto& c = slot.child;
                if (!c || !c->forked || c->pid != pid || c->master_gen != master_gen_ ||
                    c->exit_status)
                    continue;
                c->exit_status = j.value("status", 0);
                reap(slot);
            }
        } else {
            problem = "an unexpected '" + frame->type.substr(0, 32) + "' frame";
            break;
        }
    }
    if (problem.empty() && m.boot_reader.malformed()) problem = m.boot_reader.error();
    if (problem.empty() && eof) problem = "end of file";
    if (problem.empty()) return;
    log_->warn("runner={} master pid={} sent {}: replacing it (its processes go with it)",
               spec_.name, m.pid, problem);
    note_failure(master_);
    kill_now(m);
}

void RunnerPool::note_failure(Slot& slot) {
    ++slot.failures;
    slot.start_at = saturating_deadline(Clock::now(), restart_backoff(slot.failures));
}

void RunnerPool::boot_failed(Slot& slot, const std::string& why) {
    note_failure(slot);
    note_first_boot(nullptr);  // kiqd's start does not wait for a command that cannot boot
    const std::string text =
        fmt::format("runner={} did not boot: {} (retrying in {} s)", spec_.name, why,
                    restart_backoff(slot.failures).count() / 1000);
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
    close_sockets(c);  // the runner sees end of file and exits
    const auto now = Clock::now();
    c.term_at = now + kRetireGrace;
    c.kill_at = now + 2 * kRetireGrace;
}

void RunnerPool::log_output(RunnerChild& c, bool is_err) {
    Fd& fd = is_err ? c.err : c.out;
    if (!fd.open()) return;
    // A line is labelled with the job only when the process holds exactly one: with several
    // on threads, nothing says which of them wrote it.
    const std::string job_class = c.current_job_class(), jid = c.current_jid();
    const LineLabels labels{job_class, jid, spec_.name, c.pid};
    read_into(fd, is_err ? c.err_lines : c.out_lines, labels);
}

bool RunnerPool::reap(Slot& slot) {
    auto& c = *slot.child;
    if (c.reaped) return true;
    int status = 0;
    if (c.forked) {
        if (!c.exit_status && !master_alive_for(c)) {
            // Its master, and with it the reports, is gone; the child died with the master
            // (PR_SET_PDEATHSIG) or is killed here.
            if (process_gone(c))
                c.exit_status = SIGKILL;  // the wait status of "killed by SIGKILL"
            else
                signal_group(c, SIGKILL);
        }
        if (!c.exit_status) return false;
        status = *c.exit_status;
    } else if (::waitpid(c.pid, &status, WNOHANG) != c.pid) {
        return false;
    }
    c.reaped = true;
    c.status = status;
    c.pidfd.reset();
    if (!c.forked) release_process_group(c.pid);
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
        log_->warn("runner={} {}pid={} {} while idle{}", spec_.name,
                   &slot == &master_ ? "master " : "", c.pid, describe_wait_status(status),
                   tail_text(c.err_tail));
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
        bool slots_gone = true;
        auto next = now + milliseconds(1000);
        const bool master_idle =
            master_.child && !master_.child->reaped && master_.child->state == ChildState::idle;
        auto visit = [&](Slot& slot, bool is_master) {
            // A reaped child's slot frees up once its leaseholder (if any) has let it go.
            if (slot.child && slot.child->reaped && slot.child->leases == 0) slot.child.reset();
            // The master starts first; the slots' children are forked once it is ready.
            const bool may_start =
                is_master ? mode_ != Mode::direct
                          : mode_ == Mode::direct || (mode_ == Mode::fork && master_idle);
            if (!slot.child && !stopping_ && may_start) {
                if (now >= slot.start_at)
                    start_child(slot);
                else
                    next = std::min(next, slot.start_at);
            }
            if (!slot.child) return;
            auto& c = *slot.child;
            if (!c.reaped && !is_master) slots_gone = false;
            if (c.state == ChildState::booting && now >= c.boot_deadline) {
                kill_now(c);
                boot_failed(
                    slot, fmt::format("pid {} sent no ready within {} s{}", c.pid,
                                      spec_.boot_timeout.count() / 1000.0, tail_text(c.err_tail)));
            }
            if (c.state == ChildState::stopping && !c.reaped) {
                // A forked child without a pid yet is signalled once the master names it.
                if (!c.term_sent && now >= c.term_at && c.pid > 0) {
                    signal_group(c, SIGTERM);
                    c.term_sent = true;
                }
                if (now >= c.kill_at) signal_group(c, SIGKILL);
            }
            if (c.state == ChildState::booting) next = std::min(next, c.boot_deadline);
            if (!c.term_sent) next = std::min(next, std::max(c.term_at, now + milliseconds(5)));
            next = std::min(next, std::max(c.kill_at, now + milliseconds(5)));
        };
        visit(master_, true);
        for (auto& slot : slots_) visit(slot, false);
        if (stopping_ && slots_gone) {
            // The master goes last: its children die with it.
            auto& m = master_.child;
            if (m && !m->reaped && m->state != ChildState::stopping) {
                m->state = ChildState::stopping;
                ::shutdown(m->sock.get(), SHUT_RDWR);
                m->term_at = now + kRetireGrace;
                m->kill_at = now + 2 * kRetireGrace;
                next = now;
            }
            if (!m || m->reaped) {
                // Everything is reaped; release what is left.
                for (auto& slot : slots_)
                    if (slot.child && slot.child->leases == 0) slot.child.reset();
                master_.child.reset();
                return;
            }
        }
        fds.clear();
        refs.clear();
        fds.push_back({wake_fd_, POLLIN, 0});
        refs.push_back({0, -1});
        auto watch = [&](size_t i, const std::shared_ptr<RunnerChild>& c) {
            if (!c) return;
            if (c->out.open()) fds.push_back({c->out.get(), POLLIN, 0}), refs.push_back({i, 0});
            if (c->err.open()) fds.push_back({c->err.get(), POLLIN, 0}), refs.push_back({i, 1});
            if (c->pidfd.open()) fds.push_back({c->pidfd.get(), POLLIN, 0}), refs.push_back({i, 2});
            // An idle child's socket is not watched here (acquire looks at it before a job):
            // watching it would wake this thread twice per job, for the reply a leaseholder
            // reads and for the release. The master's is: its forked/exited reports.
            const bool master_idle = i == kMaster && c->state == ChildState::idle;
            if (c->leases == 0 && (c->state == ChildState::booting || master_idle))
                fds.push_back({c->sock.get(), POLLIN, 0}), refs.push_back({i, 3});
        };
        watch(kMaster, master_.child);
        for (size_t i = 0; i < slots_.size(); ++i) watch(i, slots_[i].child);
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
            auto& slot = slot_at(refs[k].slot);
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
                    if (c.leases > 0 || c.sock.get() != fds[k].fd) break;
                    if (&slot == &master_ && c.state == ChildState::idle) {
                        master_frames();
                        break;
                    }
                    if (c.state != ChildState::booting) break;
                    char buf[4096];
                    const ssize_t n = ::read(c.sock.get(), buf, sizeof buf);
                    if (n > 0) c.boot_reader.feed(buf, static_cast<size_t>(n));
                    std::string error;
                    if (auto frame = c.boot_reader.next()) {
                        if (auto ready = runner::parse_ready(*frame, error)) {
                            if (boot_reported_ || slot.failures > 0)
                                log_->info("runner={} pid={} booted after {} failure(s)",
                                           spec_.name, c.pid, slot.failures);
                            boot_reported_ = false;
                            if (&slot == &master_) {
                                master_ready(*ready);
                                break;
                            }
                            c.state = ChildState::idle;
                            take_seats_from(c, *ready);
                            log_->info("runner={} pid={} ready ({}; {} job(s) at once{})",
                                       spec_.name, c.pid, ready->runner, c.capacity,
                                       c.seat_socks.empty() ? "" : ", a socket each");
                            hand_off_idle();
                            break;
                        }
                    } else if (c.boot_reader.malformed()) {
                        error = c.boot_reader.error();
                    } else if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                        // End of file: usually the process exited, which reap reports with its
                        // status; a process that only closed the socket is stopped here.
                        // (A forked child's status comes from its master's `exited`.)
                        for (int i = 0; i < 20 && !reap(slot); ++i) {
                            ::usleep(10 * 1000);
                            if (c.forked && master_.child && !master_.child->reaped &&
                                master_.child->state == ChildState::idle)
                                master_frames();
                        }
                        if (!c.reaped) error = "nothing (it closed its socket)";
                    }
                    if (!error.empty()) {
                        kill_now(c);
                        boot_failed(slot, fmt::format("pid {} sent {}{}", c.pid, error,
                                                      tail_text(c.err_tail)));
                    }
                    break;
                }
            }
        }
        // The master first: its children's reaping depends on whether it is gone.
        if (master_.child) reap(master_);
        for (auto& slot : slots_)
            if (slot.child) reap(slot);
    }
}

std::vector<RunnerChildInfo> RunnerPool::snapshot() const {
    std::lock_guard lock(mutex_);
    std::vector<RunnerChildInfo> out;
    static constexpr const char* kState[] = {"booting", "idle", "busy", "stopping"};
    if (master_.child && !master_.child->reaped && master_.child->pid > 0) {
        const auto& m = *master_.child;
        out.push_back({spec_.name, -1, m.pid,
                       m.state == ChildState::idle ? "master" : kState[static_cast<int>(m.state)],
                       0, rss_bytes(m.pid), "", ""});
    }
    for (size_t i = 0; i < slots_.size(); ++i) {
        const auto& slot = slots_[i];
        if (!slot.child || slot.child->reaped || slot.child->pid <= 0) continue;
        const auto& c = *slot.child;
        out.push_back({spec_.name, static_cast<int>(i), c.pid, kState[static_cast<int>(c.state)],
                       c.jobs, rss_bytes(c.pid), c.current_job_class(), c.current_jid(), c.leases,
                       c.capacity});
    }
    return out;
}

std::optional<std::string> RunnerPool::boot_once(const RunnerSpec& spec,
                                                 const std::vector<std::string>& env) {
    StartedRunner s = spawn_runner(spec, env, false);
    if (s.error != 0)
        return fmt::format("cannot start {}: {}", spec.argv[0], std::strerror(s.error));
    const auto deadline = saturating_deadline(Clock::now(), spec.boot_timeout);
    runner::FrameReader reader;
    std::deque<std::string> tail;
    LineSink err_lines("stderr", kRunnerMaxLine, nullptr, &tail, kRunnerTailLines,
                       kRunnerTailBytes);
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
        if (s.err.open() && fds[1].revents) read_into(s.err, err_lines, {});
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
    release_process_group(s.pid);
    if (problem) {
        while (s.err.open() && read_into(s.err, err_lines, {})) {
            pollfd p{s.err.get(), POLLIN, 0};
            if (::poll(&p, 1, 200) <= 0) break;
        }
        *problem += tail_text(tail);
    }
    return problem;
}

}  // namespace kiqd
