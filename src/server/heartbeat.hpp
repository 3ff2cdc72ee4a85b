#pragma once
// Heartbeat: makes this process a member of the Sidekiq cluster
// (docs/data-model.md#process-record-and-heartbeat). Every 5 s (Sidekiq 6) or 10 s (7/8), in two
// MULTIs on its own connection:
//   stat:processed/failed (+ daily keys, 5-year TTL) += counts since the last beat;
//   <identity>:workers (6.x; 7+: :work, and 6 mode writes both) = running jobs, TTL 60 s;
//   SADD processes; HSET <identity> info/busy/beat/quiet/rss/rtt_us (8, auto: concurrency), TTL 60
//   s; RPOP <identity>-signals (remote TSTP/TERM/TTIN).
// The stats flush is idempotent: each batch of counts carries a per-process sequence number and
// one Lua script applies it only if <identity>:flushed (the last applied number) is lower. When a
// flush reaches Redis but its reply is lost (connection dropped, timeout), the batch is retried
// with the same number and is not counted twice; new counts wait for the next batch.
// With Sidekiq 7/8's execution metrics on (execution_metrics.hpp), the first MULTI also writes
// the per-class counts since the last beat. Under `compat: auto` each beat first reads which
// Sidekiq majors the other processes run (cluster_compat.hpp), which sets the period and the
// metrics layouts; auto writes the union of the fields 6, 7 and 8 read (both busy-hash keys, the
// `concurrency` field, the info JSON's extra fields).
// With Sidekiq 7's capsules the process record also carries `kiqd_capsules`, each capsule's
// busy threads and concurrency, for `kiqd processes` and `kiqd top`.
// Each beat (the first at start-up) also reads Redis's maxmemory-policy and warns once per change
// when it is not noeviction (eviction_policy.hpp).
// clear() leaves "processes" and deletes the busy hash at shutdown. Runs on the launcher's io
// thread only.
#include <optional>
#include <string>
#include <vector>

#include "kiqd/keys.hpp"
#include "server/cluster_compat.hpp"
#include "server/eviction_policy.hpp"
#include "server/process_identity.hpp"
#include "server/runtime.hpp"

namespace kiqd {

class Heartbeat {
  public:
    Heartbeat(Runtime& rt, const ProcessIdentity& me, std::string info_json);

    // One beat. Returns the remote signal popped from <identity>-signals, if any.
    std::optional<std::string> beat();
    // Flushes the counters (retrying a few times) and removes this process from "processes".
    void clear();
    std::chrono::seconds period() const;
    const ClusterCompat& compat() const { return compat_; }
    // The process's capsules (default first) and their WorkState slots, before the first beat.
    struct CapsuleSlots {
        std::string name;
        size_t first_slot;
        size_t threads;
    };
    void set_capsules(std::vector<CapsuleSlots> capsules) { capsules_ = std::move(capsules); }
    // Writes quiet=true at once, so the Web UI shows a quieted process without waiting a beat.
    void publish_quiet();

  private:
    struct StatsBatch {
        long long seq, processed, failed;
    };
    // Flushes the pending batch (or a new one from the counters) and the busy hash. Throws
    // redis::Error; the batch then stays pending and is retried with its sequence number.
    void flush_and_publish_work();
    // compat: auto: reads the cluster's Sidekiq majors, logs a changed decision, and sets the
    // metrics layouts. Errors leave the previous decision.
    void detect_cluster();

    Runtime& rt_;
    const ProcessIdentity& me_;
    std::string info_json_;
    redis::Connection conn_;
    ClusterCompat compat_;
    EvictionPolicyWatch eviction_;  // warns of a maxmemory-policy that can lose jobs
    long long flush_seq_ = 0;
    std::optional<StatsBatch> pending_;
    std::vector<CapsuleSlots> capsules_;  // empty: the process has only the default capsule
};

// The EVAL command of one stats flush: stat:processed/failed and their daily keys += the counts,
// applied only when `seq` is above the last one applied for `identity` (kept in
// <identity>:flushed for a week). Sending it again — a retry after a lost reply — is a no-op.
redis::Command stats_flush_command(const Keys& keys, const std::string& identity, long long seq,
                                   long long processed, long long failed, const std::string& date);

}  // namespace kiqd
