#pragma once
// RunnerChild: one process of a runner pool (docs/runner-protocol.md) and its lifecycle: how it
// is started (spawned by kiqd, or forked by the pool's preloading master), signalled, reaped and
// measured, what it wrote to stdout and stderr, and the jobs it holds.
//
// Threads: a RunnerChild belongs to its RunnerPool and every field below is guarded by the
// pool's mutex, except where a comment names another owner: the socket's reading side (`reader`)
// is used only by the leaseholder that holds `reading` (runner_pool_leases.cpp), the output
// sinks only by the thread that drains the pipes under the mutex. A process is signalled only
// under the mutex and only before it is reaped, so a signal never reaches a reused pid.
#include <spdlog/logger.h>
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "handlers/child_output.hpp"
#include "handlers/runner_protocol.hpp"
#include "handlers/unique_fd.hpp"
#include "kiqd/config.hpp"

namespace kiqd {

using RunnerClock = std::chrono::steady_clock;

// A runner's output lines: at most this long each; the last lines of stderr kept for error
// messages.
inline constexpr size_t kRunnerMaxLine = 8192;
inline constexpr size_t kRunnerTailLines = 20;
inline constexpr size_t kRunnerTailBytes = 4096;

enum class ChildState { booting, idle, busy, stopping };

// One frame a leaseholder sent and waits to have answered: a job, or a retries-exhausted call.
// Lives on the leaseholder's stack; the child points at it while it is outstanding.
struct RunnerSeat {
    uint32_t tag = 0;  // the tagged dialect's tag; 0 on an untagged child
    std::string job_class, jid;
    std::optional<runner::Frame> answer;  // set by whichever leaseholder read it
    bool timed_out = false;               // its leaseholder gave up on it (the timeout)
    std::condition_variable cv;           // answer set, the reader's role free, or the child broke
    // On a child with seat sockets: this seat's socket (-1 otherwise), the frame still to be
    // written on it and what was read from it. Only the leaseholder touches them, without the
    // mutex: nobody else writes or reads that socket while the seat is leased.
    int sock = -1;
    std::string outbox;
    size_t outbox_sent = 0;
    runner::FrameReader reader;
};

// Why a child was signalled by the pool or a leaseholder: decides what its other jobs become
// when it is gone.
enum class KillReason {
    none,      // it died, closed its socket or garbled a frame on its own: its jobs crashed
    timeout,   // one of its jobs timed out: that job failed, the others go back to their queues
    shutdown,  // kiqd's hard shutdown: every job it held goes back to its queue
};

struct RunnerChild {
    explicit RunnerChild(spdlog::logger* log);
    size_t slot = 0;
    pid_t pid = -1;
    Fd sock, out, err, pidfd;
    ChildState state = ChildState::booting;
    bool reaped = false;
    int status = 0;
    long long jobs = 0;
    RunnerClock::time_point boot_deadline{}, term_at = RunnerClock::time_point::max(),
                                             kill_at = RunnerClock::time_point::max();
    bool term_sent = false, kill_sent = false;
    std::deque<std::string> err_tail;
    LineSink out_lines, err_lines;
    runner::FrameReader boot_reader;  // the ready greeting (and, for a master, what follows)
    // Forked by the pool's master (not kiqd's own child): pid is -1 until the master's `forked`,
    // and the wait status is what its `exited` says.
    bool forked = false;
    unsigned master_gen = 0;
    std::optional<int> exit_status;

    // --- Jobs on the child (runner_pool_leases.cpp) ---
    bool tagged = false;  // its ready said "threads": frames carry tags
    int capacity = 1;     // jobs it may hold at once
    // Its ready said "seats": one socket per seat (kiqd's ends), each job and its answer on its
    // own, read by the leaseholder itself: no reader role, no hand-off between threads.
    std::vector<Fd> seat_socks;
    std::vector<bool> seat_taken;
    int leases = 0;  // leaseholders using it (seats outstanding or being set up)
    std::map<uint32_t, RunnerSeat*> seats;  // outstanding frames by tag (tag 0: untagged)
    uint32_t next_tag = 0;
    // Takes no new job: recycled (max_jobs, max_rss_mb) or one of its jobs timed out. Its
    // socket is closed once its last leaseholder lets go.
    bool draining = false;
    std::string drain_reason;
    // A job timed out: the others may finish until then, and the group gets SIGTERM at it.
    RunnerClock::time_point timeout_kill_at = RunnerClock::time_point::max();
    KillReason kill_reason = KillReason::none;
    bool failure_noted = false;  // its end was counted once toward the slot's restart backoff
    // Bytes of frames not yet written (whole frames are appended, so frames never interleave);
    // whoever holds the mutex and sees the socket writable sends more.
    std::string outbox;
    size_t outbox_sent = 0;
    // The leaseholder that reads the socket now, on behalf of every seat (the others wait on
    // their seat's cv). Only it touches `reader`.
    bool reading = false;
    runner::FrameReader reader;
    // Set once the socket failed (end of file, a malformed frame, an unknown tag): every seat
    // ends. `garbled`: the child said something malformed (it is killed at once).
    std::string broken;
    bool garbled = false;

    std::string current_job_class() const;  // a busy child's job, when it holds exactly one
    std::string current_jid() const;
};

// A started runner process: its pid and kiqd's ends of the socket and pipes.
struct StartedRunner {
    pid_t pid = -1;
    int error = 0;
    Fd sock, out, err;
};

// Starts `spec.argv` as a runner process (its own process group, PR_SET_PDEATHSIG, descriptors
// as docs/runner-protocol.md says). `preload`: as the pool's master (KIQD_RUNNER_PRELOAD=1).
// kiqd's ends are non-blocking.
StartedRunner spawn_runner(const RunnerSpec& spec, const std::vector<std::string>& env,
                           bool preload);

// Sends one small frame with descriptors attached (SCM_RIGHTS). False unless all of it went.
bool send_with_fds(int sock, const std::string& frame, const std::vector<int>& fds);

// Gives a child that asked for them its seat sockets: `capacity` socket pairs, the runner's ends
// sent on its protocol socket in one `seats` frame, kiqd's kept in `seat_socks`. False (and
// nothing kept) when they could not be made or sent: the child is then served on its one socket.
bool give_seat_sockets(RunnerChild& c);

// Ends the protocol socket and every seat socket both ways: the runner sees end of file on each
// (its threads that wait for a job end) and exits; the descriptors stay open until the child is
// gone, so that no reused number can be written to.
void close_sockets(RunnerChild& c);

// Whether a process that is not kiqd's child (so cannot be waited for) is gone.
bool process_gone(const RunnerChild& c);

// Reads what `fd` has (a bounded amount per call, so a flooding child cannot starve the others)
// into `sink`. False at end of file or on an error (the descriptor is closed then).
bool read_into(Fd& fd, LineSink& sink, const LineLabels& labels);

long long rss_bytes(pid_t pid);

// The child's process group gets `sig`, unless the child is reaped (or has no pid yet).
void signal_group(RunnerChild& c, int sig);

// Stops the child at once: SIGKILL now, and the supervisor's deadlines say so too.
void kill_now(RunnerChild& c);

// "; stderr: <the last lines>", or "" when it wrote nothing.
std::string tail_text(const std::deque<std::string>& tail);

// Restart delay after `failures` consecutive failures: 1 s doubling to 60 s.
std::chrono::milliseconds restart_backoff(int failures);

// Appends a whole frame to the child's outbox and writes what the socket takes now. False when
// the socket is broken (the caller's poll sees it too).
bool queue_frame(RunnerChild& c, const std::string& frame);
// Writes more of the outbox; true when it is empty.
bool flush_outbox(RunnerChild& c);

}  // namespace kiqd
