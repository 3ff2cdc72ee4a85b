#pragma once
// The data side of the admin command line, as Sidekiq's api.rb: functions on a
// redis::Connection that read a Sidekiq cluster's Redis data into plain structs or perform one
// action on it (docs/data-model.md#key-inventory, #queues-and-the-queues-set,
// #retries-and-the-dead-set, #process-record-and-heartbeat, #remote-signals), so they work on
// clusters of Ruby Sidekiq processes, kiqd processes, or both. Nothing here prints. The admin CLI
// is single-threaded.
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
};

// One member of the retry or dead set.
struct SetEntry {
    double score = 0.0;
    std::string member;  // the exact string in the ZSET: what ZREM needs
    std::string jid, job_class, queue, error_class, error_message;
    std::optional<long long> retry_count;
};

// Which entries of a set an action applies to. Empty jids and job_class match everything.
struct EntryFilter {
    std::vector<std::string> jids;
    std::string job_class;  // matches `class`, or `wrapped` (ActiveJob)
};

Stats fetch_stats(redis::Connection& conn, const Keys& keys);
// Every queue in the `queues` set, sorted by name. Latency as Sidekiq's Queue#latency computes
// it: now − enqueued_at of the rightmost (oldest) element.
std::vector<QueueInfo> fetch_queues(redis::Connection& conn, const Keys& keys);
// Live processes (members of `processes` whose hash still has `info`), sorted by identity.
std::vector<ProcessInfo> fetch_processes(redis::Connection& conn, const Keys& keys);
// Entries of `set_key` (keys.retry() or keys.dead()) that match, in score order.
std::vector<SetEntry> list_entries(redis::Connection& conn, const std::string& set_key,
                                   const EntryFilter& filter);
// SortedEntry#retry for each entry: retry_count − 1 (when present), a fresh enqueued_at, then
// ZREM from the set and, only if that removed it, SADD queues + LPUSH to its queue — in one Lua
// script per entry, so a job is never lost between the two steps and never pushed twice (an
// entry that the scheduler or another admin moved first is skipped). An entry whose queue key
// (or `queues`) holds another type is refused by the script before it writes anything, and
// stays in the set.
struct RetryResult {
    size_t moved = 0;
    size_t refused = 0;   // left in the set: Redis refused the move (WRONGTYPE)
    std::string refusal;  // the first refusal's error
};
RetryResult retry_entries(redis::Connection& conn, const Keys& keys, const std::string& set_key,
                          const std::vector<SetEntry>& entries, Compat compat);
// ZREM of each exact member (SortedEntry#delete). Returns how many were removed.
size_t delete_entries(redis::Connection& conn, const std::string& set_key,
                      const std::vector<SetEntry>& entries);
// Process#signal: MULTI { LPUSH <identity>-signals SIG; EXPIRE 60 }. The process pops it at its
// next heartbeat.
void send_signal(redis::Connection& conn, const Keys& keys, const std::string& identity,
                 const std::string& signal);

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
