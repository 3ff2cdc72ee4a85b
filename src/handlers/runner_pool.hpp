#pragma once
// RunnerPool: the long-lived worker processes of one `runners:` entry (docs/runner-protocol.md).
//
// Ownership and threads:
//   * the pool's supervisor thread (named "runner-<name>", runner_pool.cpp) starts, reaps,
//     recycles and restarts the children, reads their `ready` greeting, and logs their
//     stdout/stderr lines. It spawns every child, so PR_SET_PDEATHSIG ties the children to it: it
//     lives until stop().
//   * processor threads run jobs on the children through exchange() (runner_pool_leases.cpp):
//     each takes a *seat* on a child (one of its `capacity` jobs at once: 1 for a runner that
//     says nothing, min(its "threads", the pool's `threads`) for one that speaks the tagged
//     dialect), sends its frame, and waits for the answer. A child that took seat sockets (its
//     ready said "seats") has a socket per seat: the leaseholder writes its frame and reads its
//     answer on its seat's socket itself, without the mutex, so nothing changes hands per job.
//     Otherwise the leaseholders of one child share its socket: whole frames go through the
//     child's outbox, so they never interleave, and one of them at a time reads the socket for
//     all (leader/followers), handing each answer to the seat whose tag it carries. A child with
//     one seat is read by its only leaseholder.
//   * everything about a child (runner_process.hpp) is guarded by the pool's mutex. A child is
//     signalled only under that mutex and only before it is reaped, so a signal can never reach
//     a reused pid.
// One slot per `processes`: a slot holds at most one child, so the pool never has more processes
// than configured, even while an old child is being drained or recycled.
// Preload: the supervisor first starts the command as the pool's *master* (KIQD_RUNNER_PRELOAD=1).
// A master that answers `ready` with "preload": true has booted the application once; every slot's
// child is then forked by it on a `fork` frame that carries the child's socket and output pipes
// (SCM_RIGHTS), so the children share the boot copy-on-write. The master reports each child's pid
// (`forked`) and wait status (`exited`); a forked child is not kiqd's own, so it is reaped when the
// master says so (or, when the master itself died, once its pidfd says it is gone). The master
// outlives its children: at stop it is closed only after every slot is empty. A command that
// answers without "preload" becomes slot 0's child and the other slots start the command themselves
// (kiqd-ruby-runner --no-preload).
#include <spdlog/logger.h>
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "handlers/runner_protocol.hpp"
#include "kiqd/config.hpp"
#include "kiqd/job_context.hpp"

namespace kiqd {

struct RunnerChild;  // runner_process.hpp
struct RunnerSeat;

// One frame to have answered: a job (`job`, its payload exactly as it was in Redis) or a
// retries-exhausted call (`exhausted`). The class and jid label the child's log lines and
// `kiqd processes` while it runs.
struct RunnerRequest {
    const char* type;
    const std::string& data;
    std::string job_class;
    std::string jid;
};

// How a request ended (RunnerPool::exchange).
enum class RunnerEnd {
    answered,     // `done` or `fail`: `reply`
    crashed,      // the process died, closed its socket or garbled a frame: `problem`
    timed_out,    // it ran past the timeout; the process is gone
    stopped,      // kiqd's hard shutdown stopped it; the process is gone
    requeue,      // another job on the same process timed out and the process was stopped
                  // before this one finished; it is gone
    not_started,  // the stop signal came (or the pool stopped) before it reached a process
};

class RunnerHold;

struct RunnerOutcome {
    RunnerEnd end = RunnerEnd::not_started;
    std::optional<runner::Reply> reply;
    // A `fail` that carries a retry or dead decision keeps its seat: the runner waits for
    // `written` (RunnerHold::finish) before it runs Sidekiq's hooks and answers `done`.
    std::shared_ptr<RunnerHold> hold;
    std::string problem;
    pid_t pid = -1;
    std::optional<int> status;  // the wait status, when the process was reaped
    std::string stderr_tail;    // "; stderr: …" (its last lines), for error messages
};

// One child as `kiqd processes`, TTIN and /metrics show it.
struct RunnerChildInfo {
    std::string runner;
    int slot = -1;  // -1: the pool's preloading master
    pid_t pid = -1;
    std::string state;  // booting, idle, busy, stopping; the master's: master
    long long jobs = 0;
    long long rss_bytes = 0;
    std::string job_class, jid;  // while it runs exactly one job
    int in_flight = 0;           // jobs it holds now
    int capacity = 0;            // jobs it may hold at once
};

class RunnerPool;

// The seat of a job whose runner decided its failure's outcome and waits for kiqd to write it
// (docs/runner-protocol.md#retry-decisions). finish() sends `written` on the job's tag and
// waits (at most `timeout`) for the runner's `done`, then frees the seat. A hold dropped without
// finish() leaves a runner thread waiting for ever: the process is stopped and replaced.
// Processor threads; one thread per hold.
class RunnerHold {
  public:
    ~RunnerHold();
    RunnerHold(const RunnerHold&) = delete;
    RunnerHold& operator=(const RunnerHold&) = delete;
    void finish(const StopSignal& stop, std::chrono::milliseconds timeout);

  private:
    friend class RunnerPool;
    RunnerHold(RunnerPool& pool, std::shared_ptr<RunnerChild> child,
               std::unique_ptr<RunnerSeat> seat);
    RunnerPool& pool_;
    std::shared_ptr<RunnerChild> child_;
    std::unique_ptr<RunnerSeat> seat_;
    bool finished_ = false;
};

class RunnerPool {
  public:
    using Clock = std::chrono::steady_clock;
    // `env`: the children's environment (child_environment.hpp), KIQD_RUNNER_* added here.
    RunnerPool(RunnerSpec spec, std::vector<std::string> env);
    ~RunnerPool();
    RunnerPool(const RunnerPool&) = delete;
    RunnerPool& operator=(const RunnerPool&) = delete;

    const RunnerSpec& spec() const { return spec_; }
    const std::vector<std::string>& environment() const { return env_; }

    // Starts the supervisor, which boots `processes` children. Main thread, once.
    void start(spdlog::logger& log);
    // Closes every child's socket, SIGTERM, SIGKILL after `grace`, reaps all, joins the
    // supervisor. Idempotent; any thread but a leaseholder's.
    void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));

    // Runs one request on a child: takes a seat (waiting, first come first served, while every
    // child is full or booting), sends the frame, and waits for the answer, the timeout or the
    // stop signal. A timeout drains the child: it takes no new job, its other jobs get `grace`
    // to finish, then its process group gets SIGTERM (SIGKILL 5 s later). Whatever ends a
    // request other than an answer, the process is gone (reaped) before exchange returns, so
    // that no other process can run the job while this one still does. Processor threads.
    RunnerOutcome exchange(const StopSignal& stop, const RunnerRequest& request,
                           std::optional<std::chrono::milliseconds> timeout);

    // Tells every child that speaks the tagged dialect that no new job comes (`quiet`): its
    // long jobs may stop at their next safe point. With `shutdown`, kiqd is stopping
    // (`quiet {"shutdown":true}`: the application's shutdown event fires). Any thread.
    void quiet(bool shutdown = false);

    std::vector<RunnerChildInfo> snapshot() const;

    // The application's own server settings from the first `ready` (nullopt before one came).
    // Any thread.
    std::optional<runner::AppSettings> app_settings() const;
    // Waits until the first process (or the preloading master) is ready or failed to boot, the
    // pool stops, or `until` passes; then app_settings(). Main thread, at start.
    std::optional<runner::AppSettings> await_app_settings(Clock::time_point until) const;

    // For check-config: starts the command once and waits for `ready` (at most boot_timeout).
    // nullopt on success, else why it did not boot (with its stderr tail). Any thread.
    static std::optional<std::string> boot_once(const RunnerSpec& spec,
                                                const std::vector<std::string>& env);

  private:
    struct Slot {
        std::shared_ptr<RunnerChild> child;  // null: none running
        Clock::time_point start_at{};        // when to start the next one
        int failures = 0;                    // consecutive boot failures and crashes
    };
    void supervise() noexcept;
    void start_child(Slot& slot);                   // mutex held
    void start_master();                            // mutex held
    void fork_child(Slot& slot);                    // mutex held
    void master_ready(const runner::Ready& ready);  // mutex held
    // The first ready (its app settings kept) or boot failure ends await_app_settings' wait.
    void note_first_boot(const runner::AppSettings* app);  // mutex held
    // How many jobs at once the child takes, from its ready: min(its "threads", the pool's
    // `threads`) when it speaks the tagged dialect, else 1. Mutex held.
    void take_seats_from(RunnerChild& child, const runner::Ready& ready);
    void master_frames();                               // mutex held; reads forked/exited
    bool master_alive_for(const RunnerChild& c) const;  // mutex held
    Slot& slot_at(size_t index) { return index == kMaster ? master_ : slots_[index]; }
    static constexpr size_t kMaster = static_cast<size_t>(-1);
    bool reap(Slot& slot);                             // mutex held; true once the child is reaped
    void log_output(RunnerChild& child, bool is_err);  // mutex held
    void retire(RunnerChild& child, const char* why);  // mutex held
    void boot_failed(Slot& slot, const std::string& why);  // mutex held
    static void note_failure(Slot& slot);  // mutex held; counts a failure, backs off the restart
    void drain(RunnerChild& child, std::string why);  // mutex held; no new seats, then retire
    void wake();
    // A thread waiting for a seat: the child a freed seat was given to it on.
    struct Waiter {
        const RunnerRequest* request;
        const StopSignal* stop;  // a waiter told to stop is not handed a seat
        RunnerSeat* seat;
        std::shared_ptr<RunnerChild> child;
    };
    // --- runner_pool_leases.cpp, all with the mutex held ---
    std::shared_ptr<RunnerChild> acquire(std::unique_lock<std::mutex>& lock, const StopSignal& stop,
                                         const RunnerRequest& request, RunnerSeat& seat);
    std::shared_ptr<RunnerChild> take_free();  // a child with a free seat, least busy first
    void lease_to(RunnerChild& child, const RunnerRequest& request, RunnerSeat& seat);
    void hand_off_idle();  // gives free seats to the waiters, in order
    // Reads the socket once for every seat of `child` (the caller holds its reader role for the
    // call; the mutex is released while it polls).
    void read_for_seats(std::unique_lock<std::mutex>& lock, RunnerChild& child,
                        Clock::time_point until);
    // A seat with a socket of its own: writes what is left of its frame and reads its answer
    // (the mutex is released while it polls), and logs what the process printed meanwhile.
    void exchange_on_seat(std::unique_lock<std::mutex>& lock, RunnerChild& child, RunnerSeat& seat,
                          Clock::time_point until);
    // Waits until the supervisor has reaped the child or `until` passes.
    bool wait_reaped(std::unique_lock<std::mutex>& lock, RunnerChild& child,
                     Clock::time_point until);
    void release(RunnerChild& child, RunnerSeat& seat, bool broken);
    // Stops the child for its timed-out seats once its other seats are done (or their grace is).
    void stop_after_timeout(RunnerChild& child, Clock::time_point now);
    // Waits for the seat's answer (or its end: a crash, the timeout at `deadline`, the stop
    // signal) and fills `out`. An answer leaves the seat leased (the caller releases or holds
    // it); any other end releases it, the process gone.
    void await_answer(std::unique_lock<std::mutex>& lock, RunnerChild& c, RunnerSeat& seat,
                      const StopSignal& stop, Clock::time_point deadline, RunnerOutcome& out);
    friend class RunnerHold;

    RunnerSpec spec_;
    std::vector<std::string> env_;
    spdlog::logger* log_ = nullptr;
    mutable std::mutex mutex_;
    std::deque<Waiter*> waiters_;        // threads waiting for a seat, oldest first
    std::condition_variable reaped_cv_;  // a child was reaped
    std::vector<Slot> slots_;
    enum class Mode { probe, fork, direct };
    Mode mode_ = Mode::probe;  // probe: the first process has not said yet whether it forks
    Slot master_;              // the preloading master, when there is one
    unsigned master_gen_ = 0;  // counts masters started: a forked child belongs to one
    bool stopping_ = false;
    bool boot_reported_ = false;  // a boot failure was logged; the next ones are not
    int wake_fd_ = -1;            // eventfd: wakes the supervisor's poll
    std::optional<runner::AppSettings> app_settings_;  // the first ready's
    bool first_boot_ended_ = false;                    // a ready or a boot failure came
    mutable std::condition_variable first_boot_cv_;
    std::thread thread_;
};

}  // namespace kiqd
