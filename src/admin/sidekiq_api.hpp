#pragma once
// The data side of the admin command line, as Sidekiq's api.rb: functions on a
// redis::Connection that read a Sidekiq cluster's Redis data into plain structs or perform one
// action on it (docs/data-model.md#key-inventory, #queues-and-the-queues-set,
// #retries-and-the-dead-set, #process-record-and-heartbeat, #remote-signals), so they work on
// clusters of Ruby Sidekiq processes, kiqd processes, or both. Nothing here prints. The admin CLI
// is single-threaded.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiqd/clock.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd::admin {

struct Stats {
    long long processed = 0, failed = 0;
    long long busy = 0;      // sum of `busy` over live processes (Sidekiq's workers_size)
    long long enqueued = 0;  // sum of LLEN over the `queues` set
    long long scheduled = 0, retries = 0, dead = 0;
    long long processes = 0;             // SCARD processes, as Stats#processes_size
    double default_queue_latency = 0.0;  // seconds
};

struct QueueInfo {
    std::string name;
    long long size = 0;
    double latency = 0.0;  // seconds since the oldest job's enqueued_at (0 when empty)
};

struct ProcessInfo {
    std::string identity, hostname, tag;
    long long pid = 0;
    std::vector<std::string> queues, labels;
    long long concurrency = 0, busy = 0, rss_kb = 0;
    double beat = 0.0, started_at = 0.0;  // epoch seconds
    bool quiet = false;
    std::string runners;  // kiqd's `kiqd_runners` field: its runner children as JSON ("": none)
    // kiqd's `kiqd_capsules` field, Sidekiq 7 capsules' busy/concurrency, in the process's order.
    struct Capsule {
        std::string name;
        long long busy = 0, concurrency = 0;
    };
    std::vector<Capsule> capsules;  // empty: one capsule (or not kiqd)
};

// "default 1/5, reports 2/2": each capsule's busy/concurrency ("" without capsules).
std::string capsules_text(const ProcessInfo& p);
// Inserts a CAPSULES column (capsules_text) at `at` into a process table whose rows follow
// `processes`, only when some process has capsules: tables of processes without any keep their
// shape.
void add_capsules_column(const std::vector<ProcessInfo>& processes, size_t at,
                         std::vector<std::string>& headers,
                         std::vector<std::vector<std::string>>& rows);

// One member of the retry or dead set.
struct SetEntry {
    double score = 0.0;
    std::string member;  // the exact string in the ZSET: what ZREM needs
    std::string jid, job_class, queue, error_class, error_message;
    std::string args;  // the `args` array as JSON text ("" when absent)
    std::optional<long long> retry_count;
};

// A job in a queue or running (a member of a list, or the payload of a busy entry).
struct JobSummary {
    std::string payload;  // the exact bytes
    std::string jid, job_class, queue;
    std::string args;                   // JSON text of `args` ("" when absent or not JSON)
    std::optional<double> enqueued_at;  // epoch seconds
};
JobSummary summarize_job(std::string payload);

// A job running now, from a process's busy hash (<identity>:work, or :workers before 6.5).
struct BusyJob {
    std::string identity, thread;  // the process, and the hash field (its thread id)
    std::string queue;
    double run_at = 0.0;  // epoch seconds it started
    JobSummary job;
};

// Which entries of a set an action applies to. Empty jids and job_class match everything.
struct EntryFilter {
    std::vector<std::string> jids;
    std::string job_class;  // matches `class`, or `wrapped` (ActiveJob)
};

Stats fetch_stats(redis::Connection& conn, const Keys& keys);
// The same, with the queues and processes already read (kiqd top reads them anyway).
Stats fetch_stats(redis::Connection& conn, const Keys& keys, const std::vector<QueueInfo>& queues,
                  const std::vector<ProcessInfo>& processes);
// Every queue in the `queues` set, sorted by name. Latency as Sidekiq's Queue#latency computes
// it: now − enqueued_at of the rightmost (oldest) element.
std::vector<QueueInfo> fetch_queues(redis::Connection& conn, const Keys& keys);
// Live processes (members of `processes` whose hash still has `info`), sorted by identity.
std::vector<ProcessInfo> fetch_processes(redis::Connection& conn, const Keys& keys);
// Entries of `set_key` (retry, dead or schedule) that match, in score order; the first `limit`
// of them (0 = all), read page by page only as far as needed.
std::vector<SetEntry> list_entries(redis::Connection& conn, const std::string& set_key,
                                   const EntryFilter& filter, size_t limit = 0);
// What retry/delete/kill do with an entry of the retry or dead set.
//  retry:  SortedEntry#retry: retry_count − 1 (when present), a fresh enqueued_at, then ZREM
//          from the set and, only if that removed it, SADD queues + LPUSH to its queue.
//  remove: SortedEntry#delete: ZREM of the exact member.
//  kill:   SortedEntry#kill: ZREM and, only if that removed it, ZADD dead (score now, the
//          member unchanged); the dead set is then trimmed as Sidekiq's DeadSet#kill does.
// Each move is one Lua script (the scheduler's), so a job is never lost between the two steps
// and never pushed twice: an entry that the scheduler or another admin moved first is skipped.
// An entry whose destination key holds another type is refused by the script before it writes
// anything, and stays in the set.
enum class SetAction { retry, remove, kill };

struct BulkResult {
    size_t matched = 0;   // entries found that match
    size_t done = 0;      // moved (retry, kill) or deleted by this call
    size_t skipped = 0;   // gone when their turn came: moved or deleted meanwhile by another
    size_t refused = 0;   // left in the set: Redis refused the move (WRONGTYPE), or a retry of a
                          // member that is not a JSON object (Sidekiq's would raise too)
    size_t trimmed = 0;   // kill: dead entries the trims removed (over dead_max_jobs or too old)
    std::string refusal;  // the first refusal's reason
    bool redis_refused = false;  // some refusal was Redis's (WRONGTYPE), not a bad member
};

// Applies `action` to `entries` (members of `set_key`) in pipelined batches of 1,000.
struct SetActionContext {
    const Keys& keys;
    std::string set_key;
    SetAction action;
    Compat compat;
    long long dead_max_jobs, dead_timeout_seconds;  // kill's trims
};
void act_on_entries(redis::Connection& conn, const SetActionContext& ctx,
                    const std::vector<SetEntry>& entries, BulkResult& result);
// Applies `action` to every entry of the set that matches `filter`, walking it with ZSCAN in
// batches of 1,000. Entries moved meanwhile by others neither stop nor repeat the walk: ZSCAN
// returns every member present for the whole walk, and a member it returns twice is acted on
// once (the members seen are remembered for that). `progress` is called after each batch.
BulkResult act_on_matching(redis::Connection& conn, const SetActionContext& ctx,
                           const EntryFilter& filter,
                           const std::function<void(const BulkResult&)>& progress);

// Process#signal: MULTI { LPUSH <identity>-signals SIG; EXPIRE 60 }. The process pops it at its
// next heartbeat.
void send_signal(redis::Connection& conn, const Keys& keys, const std::string& identity,
                 const std::string& signal);

// The busy jobs of every live process, as Sidekiq's WorkSet: both hash names are read (a
// thread listed in both counts once), sorted by run_at.
std::vector<BusyJob> fetch_busy(redis::Connection& conn, const Keys& keys);
std::vector<BusyJob> fetch_busy(redis::Connection& conn, const Keys& keys,
                                const std::vector<ProcessInfo>& processes);

// The `limit` jobs of queue `name` that run next, next first (0 = all).
std::vector<JobSummary> list_queue(redis::Connection& conn, const Keys& keys,
                                   const std::string& name, size_t limit);
// Queue#clear: the queue's list deleted and its name taken from `queues`, in one script.
// Returns how many jobs the list held at that moment (what was deleted).
long long clear_queue(redis::Connection& conn, const Keys& keys, const std::string& name);

// Every place a job with this jid is now: a queue, the scheduled, retry or dead set, or a
// running thread (Sidekiq's find_job over each, and WorkSet).
struct FoundJob {
    std::string where;         // "queue", "scheduled", "retry", "dead" or "busy"
    std::string container;     // the queue name, the set's key, or the process identity
    std::optional<double> at;  // set score (when it runs, or died), or busy run_at
    std::string payload;
};
std::vector<FoundJob> find_job(redis::Connection& conn, const Keys& keys, const std::string& jid);

// Pause control (pause_control.hpp): what is paused and what waits.
struct PausedReport {
    struct Queue {
        std::string name;
        long long size = 0;  // jobs waiting in it, untouched
    };
    struct Worker {
        std::string job_class;
        bool paused = false;   // an operator paused it (kiqd pause worker)
        long long parked = 0;  // jobs in its parked-jobs ZSET
        std::string strategy;  // descriptor stored with its parked jobs ("" = none parked)
    };
    std::vector<Queue> queues;    // sorted by name
    std::vector<Worker> workers;  // operator-paused or with parked jobs, sorted by class
};
PausedReport fetch_paused(redis::Connection& conn, const Keys& keys);
// `kind` "worker" or "queue"; SADD/SREM of `name` in the paused set. Returns false when it was
// already in the requested state.
bool set_paused(redis::Connection& conn, const Keys& keys, const std::string& kind,
                const std::string& name, bool paused);

}  // namespace kiqd::admin
