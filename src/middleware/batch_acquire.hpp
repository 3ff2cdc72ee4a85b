#pragma once
// BatchAcquire: the RefillAcquirer (src/fetch/refill_acquirer.hpp) of the unique-jobs run lock,
// the concurrency limit and the fair-tenant registration (server side: the job is registered in
// its tenant's window where no rule moves it; a job a rule would move is left to the
// middleware, which moves it as before). When a batched reliable refill lands, it takes, in one
// script call for the whole refill, the EXEC lock (while_executing, until_and_while_executing) or
// the slot (concurrency_limit) of each job whose class asks for one, wherever that is free — and
// nothing wherever it is not, leaving those jobs to their middleware's per-job acquire, which then
// decides exactly as before (duplicate, park, conflict strategy). It registers what it took
// with the LockKeeper / SlotKeeper at once, so a lock or slot is extended while its job waits
// in the buffer and expires if the process dies.
//
// A copy the gem's client locked (until_and_while_executing with `lock_digest`) gets its EXEC
// lock the same way, with the gem's client lock released in the same call as the gem's server
// releases it at the start (unless another jid holds it); given back unstarted, it takes the
// client lock again.
//
// What it leaves to the per-job path: a copy with a wait token (back from waiting), lock types
// without a run lock, the gem's other lock types, classes configured with no option and not
// locked by the gem's client (their payloads are not even parsed: a payload naming no such
// class and no `lock_digest` is ruled out), and payloads that do not parse.
//
// Immutable after construction, shared by the processor threads (the refilling thread calls
// acquire, the thread that puts a job back calls release_unclaimed).
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fetch/refill_acquirer.hpp"
#include "kiqd/config.hpp"
#include "kiqd/job.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/script.hpp"
#include "middleware/fair_tenant.hpp"
#include "middleware/limits/slot_keeper.hpp"
#include "middleware/release_fold.hpp"
#include "middleware/unique/lock_keeper.hpp"

namespace kiqd {

class BatchAcquire final : public RefillAcquirer {
  public:
    // `slots`: null when no class has a concurrency_limit.
    BatchAcquire(const Config& config, const Keys& keys, const JobLimits& limits, LockKeeper& locks,
                 SlotKeeper* slots, std::string identity);

    void acquire(redis::Connection& conn, std::vector<UnitOfWork>& units) const override;
    void release_unclaimed(AcquiredSet& set, std::vector<redis::Command>& out) const override;
    void fold_releases(redis::Connection& conn,
                       std::vector<redis::Command>& releases) const override {
        fold_.fold(conn, releases);
    }

  private:
    // A script call's keys or arguments, handed to hiredis as views (Script::run_views): a
    // refill's hundreds of strings are not copied into a command first, and those that outlive
    // the call (the held hash's name, constants, the keys and members the refill's Acquired
    // items hold) are referred to, not copied. Kept strings live in a deque: they never move.
    class Args {
      public:
        void push_back(std::string s) {
            owned_.push_back(std::move(s));
            views_.emplace_back(owned_.back());
        }
        // `s` must outlive the script call.
        void view(std::string_view s) { views_.push_back(s); }
        void set(size_t i, std::string_view s) { views_.at(i) = s; }
        // For helpers that append to a vector of strings (FairTenant::append_probe_args):
        // they append to staging(), take_staged() keeps what they appended, in order. The
        // vector is reused, so it allocates only for the first such item.
        std::vector<std::string>& staging() { return staged_; }
        void take_staged() {
            for (auto& s : staged_) push_back(std::move(s));
            staged_.clear();
        }
        const std::vector<std::string_view>& views() const { return views_; }

      private:
        std::deque<std::string> owned_;
        std::vector<std::string_view> views_;
        std::vector<std::string> staged_;
    };

    // What one job asks for, found from its payload; appended to `keys`/`args` when it asks,
    // some as views into `wanted`'s items (which therefore must not move until the script
    // call: plan() reserves room for every item a job can ask for before adding the first).
    // Returns the parsed job when it asks for something (acquire() hands it to the processor
    // with what it took), else nullopt.
    std::optional<Job> plan(const UnitOfWork& unit, std::vector<Acquired>& wanted, Args& keys,
                            Args& args) const;
    // plan()'s fair-tenant registration and concurrency slot, for a class configured here.
    void plan_limits(const Job& job, const ClassSpec& spec, std::vector<Acquired>& wanted,
                     Args& keys, Args& args) const;

    const Config& config_;
    const Keys& keys_;
    const JobLimits& limits_;
    LockKeeper& locks_;
    SlotKeeper* slots_;
    std::string identity_;
    std::vector<std::string> class_names_;  // the classes with a run lock, a limit or fair rules
    FairTenant fair_;
    redis::Script script_;
    ReleaseFold fold_;
};

}  // namespace kiqd
