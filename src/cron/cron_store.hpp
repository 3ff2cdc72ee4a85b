#pragma once
// CronStore: sidekiq-cron's Redis data model (lib/sidekiq/cron/job.rb of 1.12 and 2.3), read and
// written exactly as the gem does, so that kiqd's cron poller, `kiqd cron`, the gem's own poller
// in Ruby processes, its Web UI tab and its API (Sidekiq::Cron::Job) share the same jobs. The
// gem has two layouts; the keys below are 1.x's, and 2.x puts a namespace (`default` unless the
// app sets another) after each prefix: cron_jobs:<ns>, cron_job:<ns>:<name>, ... Here the
// namespace "" stands for the 1.x layout.
//
//   cron_jobs                    SET of "cron_job:<name>" (the hash keys, not the names)
//   cron_job:<name>              HASH name, klass, cron, description, source (schedule|dynamic),
//                                args (JSON), message (JSON), status (enabled|disabled),
//                                active_job ("0"|"1"), queue_name_prefix, queue_name_delimiter,
//                                last_enqueue_time ("%Y-%m-%d %H:%M:%S %z"), symbolize_args,
//                                [date_as_argument]; 2.x adds namespace and retry
//   cron_job:<name>:enqueued     ZSET member = the run's time in ISO 8601 UTC, score = its epoch
//                                seconds: ZADD returning 1 is the claim of that run, which makes
//                                each run enqueued once across every poller, Ruby or kiqd
//   cron_job:<name>:jid_history  LIST of {"jid":..., "enqueued":...}, newest first, 10 kept
//
// All keys take the config's redis-namespace prefix. Stateless apart from the keys; each caller
// brings its own connection (the cron poller's thread, the admin command).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/ruby_float.hpp"  // ruby_float_text: the scores the gem writes
#include "kiqd/config.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd {

// One sidekiq-cron job as its hash holds it.
struct CronJobRecord {
    std::string ns;                             // the 2.x namespace; "" in the 1.x layout
    std::map<std::string, std::string> fields;  // every field of the hash
    std::string field(const std::string& name) const {
        auto it = fields.find(name);
        return it == fields.end() ? std::string() : it->second;
    }
    std::string name() const { return field("name"); }
    std::string klass() const {
        auto k = field("klass");
        return k.empty() ? field("class") : k;
    }
    // The gem treats a hash without a status as enabled, and any status but "enabled" as not.
    bool enabled() const {
        auto it = fields.find("status");
        return it == fields.end() || it->second == "enabled";
    }
    std::string source() const { return field("source") == "schedule" ? "schedule" : "dynamic"; }
    // The queue the job is pushed to: the message's, else "default" (as Job#initialize).
    std::string queue() const;
    // last_enqueue_time as epoch seconds; nullopt when absent or unreadable.
    std::optional<std::int64_t> last_enqueue_time() const;
};

// Time#iso8601 of a UTC time: "2026-11-26T10:00:00Z".
std::string iso8601_utc(std::int64_t t);
// The gem's LAST_ENQUEUE_TIME_FORMAT of a UTC time: "2026-11-26 10:00:05 +0000".
std::string last_enqueue_time_text(double t);
// Ruby's Time#to_s of a UTC time, as the jid history stores it: "2026-11-26 10:00:05 UTC".
std::string ruby_time_text(double t);
// The gem's parse_enqueue_time: its own format, Time#to_s ("... UTC") and ISO 8601.
std::optional<std::int64_t> parse_enqueue_time(const std::string& text);

class CronStore {
  public:
    explicit CronStore(const Keys& keys) : prefix_(keys.prefix()) {}

    // `ns` "" is the 1.x layout, anything else a 2.x namespace.
    std::string jobs_key(const std::string& ns = "") const {
        return prefix_ + (ns.empty() ? "cron_jobs" : "cron_jobs:" + ns);
    }
    std::string job_key(const std::string& name, const std::string& ns = "") const {
        return prefix_ + "cron_job:" + (ns.empty() ? "" : ns + ":") + name;
    }
    std::string enqueued_key(const std::string& name, const std::string& ns = "") const {
        return job_key(name, ns) + ":enqueued";
    }
    std::string jid_history_key(const std::string& name, const std::string& ns = "") const {
        return job_key(name, ns) + ":jid_history";
    }

    // Job.all over the given sets ("" = 1.x's cron_jobs, else 2.x's cron_jobs:<ns>): their
    // members, then every hash in one pipeline; empty hashes and keys of other types skipped.
    std::vector<CronJobRecord> all(redis::Connection& conn,
                                   const std::vector<std::string>& namespaces = {""}) const;
    // The 2.x namespaces that have a cron_jobs:<ns> key, found with SCAN (the gem's
    // `available_namespaces = :auto` uses KEYS, which blocks Redis on a big keyspace).
    std::vector<std::string> discover_namespaces(redis::Connection& conn) const;
    // sidekiq-cron 2.x's migrate_old_jobs_if_needed!, which its poller runs at start: every job
    // of the 1.x set is saved into namespace `ns` (its hash, status and last_enqueue_time kept,
    // its last run marked claimed when the 2.x job is new) and removed from the 1.x set. The
    // 1.x hash stays, as the gem leaves it. Returns the names moved.
    std::vector<std::string> migrate_v1(redis::Connection& conn, const std::string& ns,
                                        double now) const;

    // Job#save for a schedule from kiqd's YAML (source "schedule"): the hash (keeping the status
    // and last_enqueue_time Redis already has unless the YAML sets `enabled:`), the set member,
    // and — only when the job has none — the enqueued set's first entry (the run before now), so
    // that a new job does not fire at once for a run that passed before it existed.
    // `ns` as for jobs_key; 2.x also writes the namespace and retry fields.
    void save(redis::Connection& conn, const CronScheduleSpec& spec, double now,
              const std::string& ns = "") const;
    // Job.destroy_removed_jobs: deletes the "schedule" jobs of the given sets whose names are
    // not in `keep` (the gem's schedule loader does this at each start). Returns the names.
    std::vector<std::string> destroy_removed(redis::Connection& conn,
                                             const std::vector<std::string>& keep,
                                             const std::vector<std::string>& namespaces = {
                                                 ""}) const;
    // Job#destroy.
    void destroy(redis::Connection& conn, const std::string& name,
                 const std::string& ns = "") const;

  private:
    std::string prefix_;
};

}  // namespace kiqd
