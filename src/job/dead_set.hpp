#pragma once
// The "dead" ZSET (Sidekiq's morgue): insertion with Sidekiq's trims by age and size in one
// MULTI (docs/data-model.md#dead-set-trimming), and the entry kiqd writes for payloads that cannot
// run at all (not JSON, no class, too large) so that nothing is dropped and the Web UI shows the
// reason. Shared by all threads; the trims' limits may change once (a runner reporting the app's).
#include <atomic>
#include <string>
#include <vector>

#include "kiqd/clock.hpp"
#include "kiqd/job.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd {

class DeadSet {
  public:
    DeadSet(const Keys& keys, long long max_jobs, long long timeout_seconds, Compat compat)
        : keys_(keys), max_jobs_(max_jobs), timeout_seconds_(timeout_seconds), compat_(compat) {}

    // The entry and Sidekiq's two trims, bare: for a caller that sends them inside its own
    // transaction (a job's outcome with its acknowledgement, redis/transaction.hpp).
    std::vector<redis::Command> entry_commands(const std::string& payload, double now) const;
    // Sidekiq's two trims alone (by age, then by size), for entries added by a script (`kiqd
    // retries kill`).
    std::vector<redis::Command> trim_commands(double now) const;
    // The same as one MULTI ... EXEC, to send on their own.
    std::vector<redis::Command> kill_commands(const std::string& payload, double now) const;
    void kill(redis::Connection& conn, const std::string& payload) const;

    // The dead-set member for an unrunnable payload. A JSON object keeps all its fields and
    // gains error_class/error_message/failed_at (and a jid if it had none, so the Web UI can
    // address it). Anything else is wrapped as {"class":"Kiqd::InvalidJob","args":[<raw text>]…};
    // raw bytes that are not UTF-8 are kept as Base64 with "kiqd_raw_base64": true.
    std::string invalid_entry(const std::string& raw, const std::string& queue,
                              const InvalidJob& why) const;

    long long max_jobs() const { return max_jobs_.load(std::memory_order_relaxed); }
    long long timeout_seconds() const { return timeout_seconds_.load(std::memory_order_relaxed); }
    void set_limits(long long max_jobs, long long timeout_seconds) {
        max_jobs_.store(max_jobs, std::memory_order_relaxed);
        timeout_seconds_.store(timeout_seconds, std::memory_order_relaxed);
    }

  private:
    const Keys& keys_;
    std::atomic<long long> max_jobs_;
    std::atomic<long long> timeout_seconds_;
    Compat compat_;
};

// 24 lowercase hex characters, as Sidekiq's SecureRandom.hex(12).
std::string new_jid();

}  // namespace kiqd
