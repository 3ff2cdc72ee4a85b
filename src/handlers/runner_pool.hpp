#pragma once
// RunnerPool: the long-lived worker processes of one `runners:` entry (docs/runner-protocol.md).
//
// Ownership and threads:
//   * the pool's supervisor thread (named "runner-<name>") starts, reaps, recycles and restarts
//     the children, reads their `ready` greeting, and logs their stdout/stderr lines. It spawns
//     every child, so PR_SET_PDEATHSIG ties the children to it: it lives until stop().
//   * processor threads lease an idle child (acquire), own its protocol socket while they run a
//     job on it (runner_handler.cpp), and give it back (release). A leased child's socket is
//     touched by its leaseholder only, except for the request's first bytes: acquire sends them
//     as it leases the child, and when a thread waits for a child, the thread that frees one
//     (release, or the supervisor when one boots) leases it to the first waiter and sends that
//     waiter's request itself, under the mutex. The child starts the next job without waiting
//     for the waiter's thread to wake up: one thread wake-up less on each job's path while jobs
//     queue for children (concurrency above processes).
//   * everything else about a child (state, pid, counters, the job it runs) is guarded by the
//     pool's mutex. A child is signalled only under that mutex and only before it is reaped, so
//     a signal can never reach a reused pid.
// One slot per `processes`: a slot holds at most one child, so the pool never has more processes
// than configured, even while an old child is being recycled.
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

#include "kiqd/config.hpp"
#include "kiqd/job_context.hpp"

namespace kiqd {
namespace runner {
struct Ready;
}

struct RunnerChild;  // runner_pool.cpp

// What a leaseholder needs of its child. Valid until release().
struct RunnerLease {
    std::shared_ptr<RunnerChild> child;
    int socket = -1;  // non-blocking; the leaseholder's alone until release()
    pid_t pid = -1;
    size_t sent = 0;  // bytes of the request that acquire already wrote to the socket
};

// What acquire sends on the leased child: a whole frame, and the job it carries (for the
// child's log lines and `kiqd processes`; empty for a frame that is not a job). The frame must
// outlive the acquire call.
struct RunnerRequest {
    const std::string& frame;
    std::string job_class;
    std::string jid;
};

// How a lease ended.
enum class RunnerRelease {
    ok,      // the child answered; it may take the next job (or is recycled by its limits)
    broken,  // it died, misbehaved, timed out or was stopped: kill it and start another
};

// One child as `kiqd processes`, TTIN and /metrics show it.
struct RunnerChildInfo {
    std::string runner;
    int slot = -1;  // -1: the pool's preloading master
    pid_t pid = -1;
    std::string state;  // booting, idle, busy, stopping; the master's: master
    long long jobs = 0;
    long long rss_bytes = 0;
    std::string job_class, jid;  // while busy
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

    // Starts the supervisor, which boots `processes` children. Main thread, once.
    void start(spdlog::logger& log);
    // Closes every child's socket, SIGTERM, SIGKILL after `grace`, reaps all, joins the
    // supervisor. Idempotent; any thread but a leaseholder's.
    void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));

    // An idle, booted child with the request's first bytes sent to it (lease.sent), waiting for
    // one while all are busy or booting; waiters are served first come, first served. nullopt
    // when `stop` fires first or the pool is stopped (then nothing was sent).
    std::optional<RunnerLease> acquire(const StopSignal& stop, const RunnerRequest& request);
    void release(RunnerLease& lease, RunnerRelease how);

    // SIGTERM (or SIGKILL) to the child's process group unless it is already reaped.
    void signal(const RunnerLease& lease, int sig);
    // Waits until the supervisor has reaped the child or `until` passes; its wait status then.
    std::optional<int> wait_reaped(const RunnerLease& lease, Clock::time_point until);
    // The last lines of the child's stderr, for error messages.
    std::string stderr_tail(const RunnerLease& lease);

    std::vector<RunnerChildInfo> snapshot() const;

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
    void start_child(Slot& slot);                       // mutex held
    void start_master();                                // mutex held
    void fork_child(Slot& slot);                        // mutex held
    void master_ready(const runner::Ready& ready);      // mutex held
    void master_frames();                               // mutex held; reads forked/exited
    bool master_alive_for(const RunnerChild& c) const;  // mutex held
    Slot& slot_at(size_t index) { return index == kMaster ? master_ : slots_[index]; }
    static constexpr size_t kMaster = static_cast<size_t>(-1);
    bool reap(Slot& slot);                             // mutex held; true once the child is reaped
    void log_output(RunnerChild& child, bool is_err);  // mutex held
    void retire(RunnerChild& child, const char* why);  // mutex held
    void boot_failed(Slot& slot, const std::string& why);  // mutex held
    static void note_failure(Slot& slot);  // mutex held; counts a failure, backs off the restart
    void wake();
    // A thread waiting in acquire: the lease a freed child was given to it with.
    struct Waiter {
        const RunnerRequest* request;
        const StopSignal* stop;  // a waiter told to stop is not handed a child
        std::optional<RunnerLease> lease;
        std::condition_variable cv;
    };
    std::shared_ptr<RunnerChild> take_idle();  // mutex held; an idle child that is quiet, or null
    RunnerLease lease_to(const std::shared_ptr<RunnerChild>& child,
                         const RunnerRequest& request);  // mutex held; sends the first bytes
    void hand_off_idle();  // mutex held; leases idle children to the waiters, in order

    RunnerSpec spec_;
    std::vector<std::string> env_;
    spdlog::logger* log_ = nullptr;
    mutable std::mutex mutex_;
    std::deque<Waiter*> waiters_;        // threads in acquire, oldest first
    std::condition_variable reaped_cv_;  // a child was reaped
    std::vector<Slot> slots_;
    enum class Mode { probe, fork, direct };
    Mode mode_ = Mode::probe;  // probe: the first process has not said yet whether it forks
    Slot master_;              // the preloading master, when there is one
    unsigned master_gen_ = 0;  // counts masters started: a forked child belongs to one
    bool stopping_ = false;
    bool boot_reported_ = false;  // a boot failure was logged; the next ones are not
    int wake_fd_ = -1;            // eventfd: wakes the supervisor's poll
    std::thread thread_;
};

}  // namespace kiqd
