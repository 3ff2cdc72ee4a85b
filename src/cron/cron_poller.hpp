#pragma once
// CronPoller: sidekiq-cron's poller (lib/sidekiq/cron/poller.rb) inside kiqd, so that periodic
// jobs keep firing when kiqd replaces the Ruby processes that used to run the gem's poller. It
// owns its thread (a PeriodicWorker named "cron") and its Redis connection.
//
// sidekiq-cron keeps its jobs in one of two layouts (cron_store.hpp): 1.x's `cron_jobs` or 2.x's
// namespaced `cron_jobs:<ns>`. With `cron: layout: auto` the poller reads 1.x's set and every
// 2.x namespace it finds (SCAN, at the first round and every 10th), and writes the 2.x layout
// when any 2.x namespace exists, else 1.x's; `v1` / `v2` fix the choice. When it settles on
// 2.x it first moves 1.x's jobs over, as the gem's 2.x poller does when it starts.
//
// At its first round it writes the schedules of kiqd's YAML (`cron:`, `:scheduler: :schedule:`,
// `:schedule:`) into the gem's keys as the gem's schedule loader does (cron_store.hpp). Then each
// round, like Poller#enqueue, it reads every job (Job.all) and, for each enabled one whose last
// run by its cron line (fugit's previous_time) is at most 60 s old and later than the job's
// last_enqueue_time, claims that run with ZADD on cron_job:<name>:enqueued — the claim the gem's
// own poller makes, so one run is enqueued once across any number of kiqd and Sidekiq processes.
// Unlike the gem, the claim, the push and the job's bookkeeping (last_enqueue_time, jid history,
// the 24 h trim of the claims) are one Lua script: a crash between them cannot lose a run that
// another process then believes done, and a job disabled or deleted between the read and the
// claim is not enqueued.
//
// The payload is the gem's for a class it cannot load (kiqd has no Ruby classes): the job's
// stored message with fresh args (plus the time with date_as_argument), or ActiveJob's wrapper
// with active_job "1"; it goes through kiqd's client normalisation and client middleware.
//
// sidekiq-scheduler's one-off schedules (`at:`, `in:`) are not sidekiq-cron jobs: each is pushed
// once to `schedule`, at its time, by the poll before it is due (so a process that stops before
// then pushes nothing, as rufus-scheduler forgets its jobs). An `at:` run is claimed once across
// the fleet (SET NX on kiqd:scheduler:at:<name>:<time>, in one script with the push); an `in:`
// run counts from each process's start, once per process, as rufus-scheduler fires it in each
// Ruby process. A time already more than the grace period past is skipped with a log line.
//
// A run missed because no poller ran within 60 s after it (every process down, or a restart
// longer than that) is skipped, as the gem skips it; one that a restart delays by less is
// enqueued once when the next poll comes. Polls every `cron_poll_interval` (the gem's key and
// default, 30 s) with Sidekiq's ±50 % randomisation. Stops on quiet, as the gem's does.
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/periodic_worker.hpp"
#include "cron/cron_expression.hpp"
#include "cron/cron_store.hpp"
#include "kiqd/redis/script.hpp"
#include "server/runtime.hpp"

namespace kiqd {

class CronPoller {
  public:
    CronPoller(Runtime& rt, const Client& client);
    ~CronPoller();
    void start();          // no thread when cron_poll_interval is 0
    void stop() noexcept;  // idempotent; joins the thread

    // The first round's work: the YAML's schedules into the gem's keys (public for tests).
    void save_schedules(redis::Connection& conn, double now);
    // One pass over every job at `now` (epoch seconds); returns how many runs it enqueued.
    size_t enqueue_due(redis::Connection& conn, double now);
    // The one-off schedules due before `now + horizon` seconds and not pushed yet, pushed
    // (see above); returns how many this call pushed. Public for tests, as is the start time
    // `in:` counts from (the poller's construction).
    size_t push_one_offs(redis::Connection& conn, double now, double horizon);
    void set_started(double t) { started_ = t; }
    // The layout and the sets read (public for tests): "" is 1.x's set, else a namespace.
    bool writes_v2() const { return v2_; }
    const std::vector<std::string>& sets() const { return sets_; }

  private:
    void poll();
    // Decides the layout and the sets to read (see above); migrates 1.x jobs on turning to 2.x.
    void refresh_layout(redis::Connection& conn, double now);
    std::string describe_sets(const std::vector<std::string>& sets) const;
    // Claims and enqueues the run of `job` due at `now`, if any; true when this call did.
    bool enqueue_job(redis::Connection& conn, const CronJobRecord& job, double now);
    const CronExpression* expression(const CronJobRecord& job);
    // Logs a job's problem once, until it changes or goes (then one info line).
    void report(const std::string& name, const std::string& problem);

    Runtime& rt_;
    const Client& client_;
    CronStore store_;
    redis::Script enqueue_script_;
    redis::Script one_off_script_;
    double started_;
    std::set<std::string> one_offs_done_;  // one-off schedules pushed or skipped, by name
    std::mt19937_64 rng_;
    std::unique_ptr<redis::Connection> conn_;  // only the poller thread uses it
    bool schedules_saved_ = false;
    bool v2_ = false;                // writes sidekiq-cron 2.x's layout
    std::vector<std::string> sets_;  // read each round; empty until the first round
    unsigned rounds_ = 0;
    std::map<std::string, std::unique_ptr<CronExpression>> parsed_;  // by cron line
    std::map<std::string, std::string> problems_;                    // job name → logged problem
    PeriodicWorker worker_;  // last: its thread ends before the members it uses go
};

}  // namespace kiqd
