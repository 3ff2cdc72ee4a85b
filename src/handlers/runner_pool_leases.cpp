// The processor threads' side of a runner pool (runner_pool.hpp): seats on the children, the
// exchange of a frame and its answer, and what a timeout, a crash or the hard shutdown make of
// every job a process holds. Everything here runs on processor threads with the pool's mutex
// held, except a leaseholder's poll and read of the socket while it holds the child's reader
// role (read_for_seats).
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "handlers/runner_pool.hpp"
#include "handlers/runner_process.hpp"
#include "kiqd/deadline.hpp"

namespace kiqd {

using std::chrono::milliseconds;
using Clock = RunnerPool::Clock;

namespace {
const milliseconds kTimeoutGrace{5000};   // a timed-out process's SIGTERM → SIGKILL
const milliseconds kShutdownGrace{2000};  // the hard shutdown's, as for exec commands
const milliseconds kTick{100};            // how often a waiting seat looks at its stop signal

int poll_wait_ms(Clock::time_point until) {
    const auto left = std::chrono::duration_cast<milliseconds>(until - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>(left, 0, kTick.count()));
}
}  // namespace

std::shared_ptr<RunnerChild> RunnerPool::take_free() {
    std::shared_ptr<RunnerChild> best;
    for (auto& slot : slots_) {
        auto& c = slot.child;
        if (!c || c->reaped || c->draining || !c->broken.empty() || c->leases >= c->capacity)
            continue;
        if (c->state != ChildState::idle && c->state != ChildState::busy) continue;
        // A process that reached max_jobs with the jobs it holds takes no more.
        if (spec_.max_jobs > 0 && c->jobs + c->leases >= spec_.max_jobs) continue;
        if (c->leases == 0) {
            // An idle runner has nothing to say: one that wrote or closed its socket is exiting
            // or confused, and its bytes must not be taken for the next job's answer.
            pollfd quiet{c->sock.get(), POLLIN, 0};
            if (::poll(&quiet, 1, 0) > 0) {
                log_->warn("runner={} pid={} wrote or closed its socket while idle: replacing it",
                           spec_.name, c->pid);
                note_failure(slot);
                kill_now(*c);
                wake();
                continue;
            }
        }
        // The least busy process first: jobs spread over the processes (and their cores).
        if (!best || c->leases < best->leases) best = c;
    }
    return best;
}

void RunnerPool::lease_to(RunnerChild& c, const RunnerRequest& request, RunnerSeat& seat) {
    if (!c.seat_socks.empty()) {
        // A free seat socket; the leaseholder writes the frame itself, without the mutex.
        const auto free = std::find(c.seat_taken.begin(), c.seat_taken.end(), false);
        const auto index = static_cast<size_t>(free - c.seat_taken.begin());
        *free = true;
        seat.tag = static_cast<uint32_t>(index + 1);  // the key in `seats`; never on the wire
        seat.sock = c.seat_socks[index].get();
        seat.outbox = runner::encode_frame(request.type, request.data);
        seat.job_class = request.job_class;
        seat.jid = request.jid;
        c.seats[seat.tag] = &seat;
        ++c.leases;
        c.state = ChildState::busy;
        return;
    }
    if (c.tagged) {
        do {
            if (++c.next_tag == 0) c.next_tag = 1;
        } while (c.seats.count(c.next_tag));
        seat.tag = c.next_tag;
    }
    seat.job_class = request.job_class;
    seat.jid = request.jid;
    c.seats[seat.tag] = &seat;
    ++c.leases;
    c.state = ChildState::busy;
    // Sent now, under the mutex: the child starts the job without waiting for the leaseholder's
    // thread to wake up (a waiter is handed its seat by the thread that freed one). A socket
    // that fails is seen by the next read.
    queue_frame(c, runner::encode_frame(request.type, request.data, seat.tag));
}

void RunnerPool::hand_off_idle() {
    while (!waiters_.empty() && !stopping_) {
        Waiter* w = waiters_.front();
        if (w->stop->stop_requested()) {
            // Its job must not start now; the waiter leaves empty-handed.
            waiters_.pop_front();
            w->seat->cv.notify_one();
            continue;
        }
        auto child = take_free();
        if (!child) return;
        waiters_.pop_front();
        lease_to(*child, *w->request, *w->seat);
        w->child = std::move(child);
        w->seat->cv.notify_one();
    }
}

std::shared_ptr<RunnerChild> RunnerPool::acquire(std::unique_lock<std::mutex>& lock,
                                                 const StopSignal& stop,
                                                 const RunnerRequest& request, RunnerSeat& seat) {
    if (stopping_ || stop.stop_requested()) return nullptr;
    if (waiters_.empty())
        if (auto child = take_free()) {
            lease_to(*child, request, seat);
            return child;
        }
    Waiter me{&request, &stop, &seat, nullptr};
    waiters_.push_back(&me);
    for (;;) {
        // A seat handed over is taken even when stopping: its frame is on the socket.
        if (me.child) return std::move(me.child);
        if (stopping_ || stop.stop_requested()) {
            // Still queued unless hand_off_idle already dropped it.
            const auto it = std::find(waiters_.begin(), waiters_.end(), &me);
            if (it != waiters_.end()) waiters_.erase(it);
            return nullptr;
        }
        // The stop signal has its own condition variable: look at it every tick.
        seat.cv.wait_for(lock, kTick);
    }
}

void RunnerPool::read_for_seats(std::unique_lock<std::mutex>& lock, RunnerChild& c,
                                Clock::time_point until) {
    c.reading = true;
    const int fd = c.sock.get();
    const bool want_out = !c.outbox.empty();
    lock.unlock();
    pollfd p{fd, static_cast<short>(POLLIN | (want_out ? POLLOUT : 0)), 0};
    ::poll(&p, 1, poll_wait_ms(until));
    char buf[65536];
    ssize_t n = 0;
    int error = 0;
    const bool readable = p.revents & (POLLIN | POLLHUP | POLLERR);
    if (readable) {
        n = ::recv(fd, buf, sizeof buf, 0);
        error = errno;
        if (n > 0) c.reader.feed(buf, static_cast<size_t>(n));
    }
    lock.lock();
    c.reading = false;
    if (p.revents & POLLOUT) flush_outbox(c);
    auto break_child = [&](std::string why, bool garbled) {
        if (c.broken.empty()) c.broken = std::move(why);
        c.garbled = c.garbled || garbled;
    };
    if (n > 0) {
        while (auto frame = c.reader.next()) {
            auto it = c.seats.find(frame->tag);
            if (it == c.seats.end() || it->second->answer) {
                break_child(frame->tag || c.tagged
                                ? fmt::format("answered with a '{}' frame whose tag {} it was not "
                                              "sent",
                                              frame->type.substr(0, 32), frame->tag)
                                : "answered with a '" + frame->type.substr(0, 32) +
                                      "' frame while it was sent nothing",
                            true);
                break;
            }
            it->second->answer = std::move(*frame);
            it->second->cv.notify_one();
        }
        if (c.reader.malformed()) break_child("answered with " + c.reader.error(), true);
    } else if (readable && (n == 0 || (error != EAGAIN && error != EINTR))) {
        break_child(
            c.reader.pending() ? "closed its socket in the middle of a reply" : "closed its socket",
            false);
    }
    if (!c.broken.empty())
        for (auto& [tag, seat] : c.seats) seat->cv.notify_one();
}

void RunnerPool::exchange_on_seat(std::unique_lock<std::mutex>& lock, RunnerChild& c,
                                  RunnerSeat& seat, Clock::time_point until) {
    // Usually a send(2), a poll(2) and a recv(2). A process that holds this job alone has its
    // output watched in the same poll, so that what the job printed before its answer is logged
    // with its class and jid (log_output labels lines only then); with several jobs on it, the
    // supervisor logs the output, and the other leaseholders are not woken by every line.
    const bool watch_output = c.leases == 1;
    const int out_fd = watch_output ? c.out.get() : -1, err_fd = watch_output ? c.err.get() : -1;
    auto frame = seat.reader.next();
    bool eof = false;
    int error = 0;
    // The protocol socket too: a runner that holds seats has nothing to say on it, so bytes (or
    // end of file) there mean it is confused or gone, and its jobs end with it.
    pollfd p[4] = {{seat.sock, POLLIN, 0},
                   {out_fd, POLLIN, 0},
                   {err_fd, POLLIN, 0},
                   {c.sock.get(), POLLIN, 0}};
    if (!frame && !seat.reader.malformed()) {
        lock.unlock();
        while (seat.outbox_sent < seat.outbox.size()) {
            const ssize_t w =
                ::send(seat.sock, seat.outbox.data() + seat.outbox_sent,
                       seat.outbox.size() - seat.outbox_sent, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0)
                seat.outbox_sent += static_cast<size_t>(w);
            else if (w < 0 && errno == EINTR)
                continue;
            else
                break;  // full (EAGAIN): poll for room below; broken: recv sees it
        }
        if (seat.outbox_sent < seat.outbox.size()) p[0].events |= POLLOUT;
        ::poll(p, 4, poll_wait_ms(until));
        if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            char buf[65536];
            const ssize_t n = ::recv(seat.sock, buf, sizeof buf, MSG_DONTWAIT);
            error = errno;
            if (n > 0) {
                seat.reader.feed(buf, static_cast<size_t>(n));
                frame = seat.reader.next();
            } else if (n == 0 || (error != EAGAIN && error != EINTR)) {
                eof = true;
            }
        }
        lock.lock();
    }
    // What the job printed goes to the log before its answer is taken, with its class and jid.
    if (p[1].revents && out_fd >= 0 && c.out.get() == out_fd) log_output(c, false);
    if (p[2].revents && err_fd >= 0 && c.err.get() == err_fd) log_output(c, true);
    auto break_child = [&](std::string why, bool garbled) {
        if (c.broken.empty()) c.broken = std::move(why);
        c.garbled = c.garbled || garbled;
    };
    if (p[3].revents && c.broken.empty()) {
        // Read under the mutex (any seat's leaseholder may look): whatever it is ends the child.
        char buf[4096];
        const ssize_t n = ::recv(c.sock.get(), buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
            c.reader.feed(buf, static_cast<size_t>(n));
            if (auto stray = c.reader.next())
                break_child("sent a '" + stray->type.substr(0, 32) +
                                "' frame on its protocol socket while its jobs run on seats",
                            true);
            else if (c.reader.malformed())
                break_child("answered with " + c.reader.error(), true);
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            break_child("closed its socket", false);
        }
        if (!c.broken.empty()) return;
    }
    if (frame) {
        if (seat.answer || seat.reader.pending() > 0 || seat.outbox_sent < seat.outbox.size())
            break_child("answered with a '" + frame->type.substr(0, 32) +
                            "' frame on a seat it was not asked on",
                        true);
        else
            seat.answer = std::move(*frame);
    } else if (seat.reader.malformed()) {
        break_child("answered with " + seat.reader.error(), true);
    } else if (eof) {
        break_child(seat.reader.pending() ? "closed its socket in the middle of a reply"
                                          : "closed its socket",
                    false);
    }
}

bool RunnerPool::wait_reaped(std::unique_lock<std::mutex>& lock, RunnerChild& c,
                             Clock::time_point until) {
    wake();
    return reaped_cv_.wait_until(lock, until, [&] { return c.reaped; });
}

void RunnerPool::stop_after_timeout(RunnerChild& c, Clock::time_point now) {
    // The group gets SIGTERM once only timed-out jobs are left on it, or when the others' grace
    // is over; the supervisor sends it (and SIGKILL after kTimeoutGrace) if it is not sent here.
    const bool only_timed_out = std::all_of(c.seats.begin(), c.seats.end(),
                                            [](const auto& kv) { return kv.second->timed_out; });
    const auto term_at = only_timed_out ? now : c.timeout_kill_at;
    if (term_at < c.term_at) {
        c.state = ChildState::stopping;
        c.term_at = term_at;
        c.kill_at = saturating_deadline(term_at, kTimeoutGrace);
        if (term_at <= now && !c.term_sent && c.pid > 0) {
            signal_group(c, SIGTERM);
            c.term_sent = true;
        }
        wake();
    }
}

RunnerOutcome RunnerPool::exchange(const StopSignal& stop, const RunnerRequest& request,
                                   std::optional<milliseconds> timeout) {
    // On the heap: a seat whose answer holds it (RunnerHold) outlives this call.
    auto seat = std::make_unique<RunnerSeat>();
    RunnerOutcome out;
    std::unique_lock lock(mutex_);
    auto child = acquire(lock, stop, request, *seat);
    if (!child) return out;  // not_started
    out.pid = child->pid;
    const auto deadline =
        timeout ? saturating_deadline(Clock::now(), *timeout) : Clock::time_point::max();
    await_answer(lock, *child, *seat, stop, deadline, out);
    if (out.end != RunnerEnd::answered) return out;
    if (out.reply->awaits_written())
        out.hold.reset(new RunnerHold(*this, std::move(child), std::move(seat)));
    else
        release(*child, *seat, false);
    return out;
}

void RunnerPool::await_answer(std::unique_lock<std::mutex>& lock, RunnerChild& c, RunnerSeat& seat,
                              const StopSignal& stop, Clock::time_point deadline,
                              RunnerOutcome& out) {
    bool stopping = false;
    for (;;) {
        if (seat.answer && !seat.timed_out) {
            std::string error;
            out.reply = runner::parse_reply(*seat.answer, error);
            if (out.reply) {
                out.end = RunnerEnd::answered;
                return;
            }
            if (c.broken.empty()) c.broken = "answered with " + error;
            c.garbled = true;
        }
        if (!c.broken.empty()) break;
        const auto now = Clock::now();
        if (!stopping && !seat.timed_out && stop.stop_requested()) {
            // Kiqd's hard shutdown: the group gets SIGTERM, SIGKILL after the grace; an answer
            // that comes meanwhile still counts.
            stopping = true;
            if (c.kill_reason == KillReason::none) c.kill_reason = KillReason::shutdown;
            c.state = ChildState::stopping;
            if (!c.term_sent && c.pid > 0) {
                signal_group(c, SIGTERM);
                c.term_sent = true;
            }
            c.term_at = std::min(c.term_at, now);
            c.kill_at = std::min(c.kill_at, saturating_deadline(now, kShutdownGrace));
            wake();
        } else if (!stopping && !seat.timed_out && now >= deadline) {
            seat.timed_out = true;
            if (c.kill_reason == KillReason::none) c.kill_reason = KillReason::timeout;
            if (!c.draining) {
                c.draining = true;
                c.drain_reason = "a job timed out";
                c.timeout_kill_at = saturating_deadline(now, kTimeoutGrace);
            }
            stop_after_timeout(c, now);
        }
        const auto until = std::min({deadline, now + kTick});
        if (seat.sock >= 0)
            exchange_on_seat(lock, c, seat, until);
        else if (!c.reading)
            read_for_seats(lock, c, until);
        else
            seat.cv.wait_until(lock, until);
    }
    // The socket is done with: the process goes before its job goes anywhere else, so that no
    // other process can run the job while this one still does. One that closed its socket may
    // still be exiting on its own (its status is the better message); one that garbled a frame
    // is killed at once.
    if (!c.garbled) wait_reaped(lock, c, Clock::now() + milliseconds(1000));
    if (!c.reaped) {
        signal_group(c, SIGKILL);
        wait_reaped(lock, c, Clock::now() + milliseconds(5000));
    }
    if (c.reaped) out.status = c.status;
    out.stderr_tail = tail_text(c.err_tail);
    if (seat.timed_out)
        out.end = RunnerEnd::timed_out;
    else if (stopping || c.kill_reason == KillReason::shutdown)
        out.end = RunnerEnd::stopped;
    else if (c.kill_reason == KillReason::timeout && !c.garbled)
        out.end = RunnerEnd::requeue;
    else
        out.end = RunnerEnd::crashed;
    out.problem = c.broken;
    release(c, seat, true);
}

RunnerHold::RunnerHold(RunnerPool& pool, std::shared_ptr<RunnerChild> child,
                       std::unique_ptr<RunnerSeat> seat)
    : pool_(pool), child_(std::move(child)), seat_(std::move(seat)) {}

void RunnerHold::finish(const StopSignal& stop, milliseconds timeout) {
    if (finished_) return;
    finished_ = true;
    std::unique_lock lock(pool_.mutex_);
    RunnerChild& c = *child_;
    if (!c.broken.empty() || c.reaped) {
        // It ended while kiqd wrote: nothing waits for `written` any more.
        pool_.release(c, *seat_, true);
        return;
    }
    seat_->answer.reset();
    if (seat_->sock >= 0) {
        seat_->outbox = runner::encode_frame("written", "{}");
        seat_->outbox_sent = 0;
    } else {
        queue_frame(c, runner::encode_frame("written", "{}", seat_->tag));
    }
    RunnerOutcome out;
    pool_.await_answer(lock, c, *seat_, stop, saturating_deadline(Clock::now(), timeout), out);
    if (out.end == RunnerEnd::answered) {
        pool_.release(c, *seat_, false);
        return;
    }
    pool_.log_->warn(
        "runner={} pid {} did not finish the hooks after its failed job was written "
        "({})",
        pool_.spec_.name, out.pid > 0 ? out.pid : c.pid,
        out.problem.empty() ? "timeout or shutdown" : out.problem);
}

RunnerHold::~RunnerHold() {
    if (finished_) return;
    // Never finished (the outcome was not recorded): the runner's thread would wait for ever.
    std::unique_lock lock(pool_.mutex_);
    RunnerChild& c = *child_;
    if (c.broken.empty()) c.broken = "its failed job's outcome was never written";
    pool_.release(c, *seat_, true);
}

void RunnerPool::drain(RunnerChild& c, std::string why) {
    if (!c.draining) {
        c.draining = true;
        c.drain_reason = std::move(why);
    }
    if (c.leases == 0 && c.state != ChildState::stopping) retire(c, c.drain_reason.c_str());
}

void RunnerPool::release(RunnerChild& c, RunnerSeat& seat, bool broken) {
    auto& slot = slots_[c.slot];
    if (seat.sock >= 0) {
        // Its output was looked at with its answer (exchange_on_seat). A seat socket left with
        // part of a frame on it is not reused: the process is stopped below.
        c.seat_taken[seat.tag - 1] = false;
        broken = broken || seat.reader.pending() > 0;
    } else {
        // What the job printed is in the pipes before its answer (the runner writes it first):
        // logged here, with the job's class and jid, before its seat goes. One poll(2).
        pollfd out[2] = {{c.out.get(), POLLIN, 0}, {c.err.get(), POLLIN, 0}};
        if (::poll(out, 2, 0) > 0) {
            if (out[0].revents) log_output(c, false);
            if (out[1].revents) log_output(c, true);
        }
    }
    c.seats.erase(seat.tag);
    --c.leases;
    // The supervisor is woken only when it has something to do (a child to stop); a child that
    // just takes its next job needs nothing of it, and a wake per job costs a thread switch.
    if (broken || c.reaped) {
        if (!c.failure_noted && c.kill_reason != KillReason::shutdown) {
            c.failure_noted = true;
            note_failure(slot);
        }
        kill_now(c);
        wake();
    } else {
        ++c.jobs;
        slot.failures = 0;
        if (c.state != ChildState::stopping) {
            if (c.leases == 0 && !c.draining) c.state = ChildState::idle;
            const long long rss = spec_.max_rss_mb > 0 && !c.draining ? rss_bytes(c.pid) : 0;
            if (stopping_)
                drain(c, "kiqd is stopping");
            else if (spec_.max_jobs > 0 && c.jobs >= spec_.max_jobs)
                drain(c, fmt::format("max_jobs {}", spec_.max_jobs));
            else if (spec_.max_rss_mb > 0 && rss > spec_.max_rss_mb * 1024 * 1024)
                drain(c, fmt::format("RSS {} MB above max_rss_mb {}", rss / (1024 * 1024),
                                     spec_.max_rss_mb));
            else if (c.draining)
                drain(c, c.drain_reason);
            if (c.state == ChildState::stopping) wake();
        } else if (c.kill_reason == KillReason::timeout) {
            stop_after_timeout(c, Clock::now());
        }
    }
    // A freed seat may go straight to a thread that waits with a job; a leaseholder leaving the
    // reader's role to the others wakes one of them to take it.
    hand_off_idle();
    if (!c.reading)
        for (auto& [tag, other] : c.seats)
            if (!other->answer) {
                other->cv.notify_one();
                break;
            }
}

void RunnerPool::quiet(bool shutdown) {
    std::lock_guard lock(mutex_);
    const std::string frame =
        runner::encode_frame("quiet", shutdown ? R"({"shutdown":true})" : "{}");
    for (auto& slot : slots_) {
        auto& c = slot.child;
        if (c && c->tagged && !c->reaped && c->broken.empty() && c->state != ChildState::booting)
            queue_frame(*c, frame);
    }
}

}  // namespace kiqd
