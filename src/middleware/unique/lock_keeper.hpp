#pragma once
// LockKeeper: keeps the EXEC locks of running unique jobs alive and frees the ones whose owner
// died. Processor threads add a lock when their job takes it and remove it when they release it
// (under a mutex; no Redis call). The keeper's own thread, with its own connection,
//   * every 500 ms extends (PEXPIRE, only while the lock still holds this owner's token) each
//     lock a third of whose TTL has passed since its last extension, so a running job never
//     loses its lock, while a lock whose process died (kill -9, host lost) expires by itself;
//   * keeps this process's liveness key `kiqd:unique:alive:<identity>` (TTL kLivenessTtl):
//     written in start(), before the launcher starts any processor, refreshed every
//     kLivenessRefresh and first thing after a failed round (Redis back after an outage);
//   * every reaper_interval, if it wins the fleet-wide lock (SET NX PX interval), frees the
//     gem's client locks whose holder jid was in no queue, set or process (lock_survey.hpp) in
//     this pass and its previous one (what the gem's orphan reaper does, for fleets without a
//     Ruby server), and reads the
//     `kiqd:unique:held` hash (EXEC key → "<identity> <token>") and releases the locks whose
//     owner identity has none of: a live Sidekiq process record (60 s TTL, written by the first
//     heartbeat, which may come after a processor took a lock), the unique liveness key, the
//     reliable-fetch liveness key. So no lock outlives its owner by more than kLivenessTtl plus
//     the interval, whatever its own TTL, and a live owner keeps its locks through an outage
//     shorter than kLivenessTtl.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/periodic_worker.hpp"
#include "kiqd/job_context.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"
#include "kiqd/redis/script.hpp"

// The held hash's marker field: not a lock. Written with every HSET of locks into the held
// hash, so the hash always has one value longer than Redis's hash-max-listpack-value (64 bytes
// by default) and Redis keeps it in its hashtable encoding. Otherwise a hash of up to 128 short
// fields stays a listpack, and each lock's HSET, HMGET and HDEL scans it field by field: with
// about a hundred locks in flight that was 1.2 µs of Redis per job in the batched unique row.
// Readers of the held hash skip it (LockKeeper::is_marker); its value says what it is to an
// operator reading the hash. The field never matches a lock key (those end in ":EXEC").
#define KIQD_HELD_MARKER_FIELD "kiqd:marker"
// (No quote marks in either: the scripts embed them in single-quoted Lua strings.)
#define KIQD_HELD_MARKER_VALUE                                                         \
    "not a lock: this field keeps the hash in the hashtable encoding of Redis, where " \
    "each lock field is found without a scan"

// release_lock(lock, held, owner): frees the EXEC lock `lock` if `owner` still holds it and
// forgets it in the held hash `held`; 1 when it freed the lock. release_locks(held, locks,
// owners) does the same for many locks of one held hash with four calls per 1000 locks (MGET,
// HMGET, DEL, HDEL; a lock key of another type reads as not held). Lua functions shared by the
// release script and the refill's folded releases (release_fold.hpp). release_lock is not
// release_locks of one lock: for one lock, GET and HGET cost Redis less than MGET and HMGET through
// unpack and two tables (basic fetch's unique row, where every job runs it: 4.1-4.2 against 4.5-5.0
// µs a script call).
#define KIQD_LOCK_RELEASE_LUA                                                       \
    "local function release_lock(lock, held, owner)\n"                              \
    "  local holder = redis.call('get', lock)\n"                                    \
    "  local listed = redis.call('hget', held, lock)\n"                             \
    "  local freed = 0\n"                                                           \
    "  if holder == owner then\n"                                                   \
    "    redis.call('del', lock)\n"                                                 \
    "    freed = 1\n"                                                               \
    "  end\n"                                                                       \
    "  if listed == owner then redis.call('hdel', held, lock) end\n"                \
    "  return freed\n"                                                              \
    "end\n"                                                                         \
    "local function release_locks(held, locks, owners)\n"                           \
    "  for i = 1, #locks, 1000 do\n"                                                \
    "    local j = math.min(i + 999, #locks)\n"                                     \
    "    local holders = redis.call('mget', unpack(locks, i, j))\n"                 \
    "    local listed = redis.call('hmget', held, unpack(locks, i, j))\n"           \
    "    local del, hdel = {}, {}\n"                                                \
    "    for n = i, j do\n"                                                         \
    "      if holders[n - i + 1] == owners[n] then del[#del + 1] = locks[n] end\n"  \
    "      if listed[n - i + 1] == owners[n] then hdel[#hdel + 1] = locks[n] end\n" \
    "    end\n"                                                                     \
    "    if #del > 0 then redis.call('del', unpack(del)) end\n"                     \
    "    if #hdel > 0 then redis.call('hdel', held, unpack(hdel)) end\n"            \
    "  end\n"                                                                       \
    "end\n"

namespace kiqd {

class LockKeeper {
  public:
    LockKeeper(const Keys& keys, redis::ConnectionOptions options,
               std::chrono::milliseconds reaper_interval, std::string identity,
               spdlog::logger& log);
    ~LockKeeper();
    void start();
    void stop() noexcept;  // idempotent; joins the thread

    // Called by processor threads around a job that holds an EXEC lock.
    uint64_t hold(std::string key, std::string owner, std::chrono::milliseconds ttl);
    void release(uint64_t id);
    size_t held() const;

    // One extension round / one reaper pass. Public for tests.
    size_t extend_due(redis::Connection& conn, bool all = false);
    size_t reap(redis::Connection& conn, bool take_lock = true);
    // Locks this process's reaper freed since it started (/metrics).
    unsigned long long reaped_total() const { return reaped_total_.load(); }

    // The identity part of a lock owner "<identity> <token>": up to the last space (the token
    // is "<hex>@<epoch seconds the lock was taken>"; kiqd's identities have no space either,
    // encode_host_name).
    static std::string owner_identity(const std::string& owner);
    // A fresh owner for a lock taken now by `identity`, and when an owner took its lock
    // (nullopt for owners without the time, written before it was added).
    static std::string new_owner(const std::string& identity);
    static std::optional<double> owner_since(const std::string& owner);
    // Whether each identity shows a sign of life (a process record, the keeper's liveness key,
    // reliable fetch's liveness key): one round trip. Used by the reaper and `kiqd unique`.
    static std::vector<bool> identities_alive(redis::Connection& conn, const Keys& keys,
                                              const std::vector<std::string>& identities);

    static constexpr std::chrono::seconds kLivenessTtl{300};
    static constexpr std::chrono::seconds kLivenessRefresh{20};

    // The script that frees an EXEC lock if `owner` still holds it and forgets it in the held
    // hash. KEYS[1] exec lock, KEYS[2] held hash; ARGV[1] owner.
    static const char* release_script_source();
    // Whether a field of the held hash is its marker (KIQD_HELD_MARKER_FIELD), not a lock.
    static bool is_marker(std::string_view field) { return field == KIQD_HELD_MARKER_FIELD; }
    const std::string& held_hash() const { return held_hash_; }

  private:
    struct Held {
        std::string key, owner;
        std::chrono::milliseconds ttl;
        std::chrono::steady_clock::time_point extended;
    };
    void round();  // one round of the keeper thread
    size_t reap_run_locks(redis::Connection& conn);
    size_t reap_client_locks(redis::Connection& conn);
    void mark_alive(redis::Connection& conn);

    const Keys& keys_;
    redis::ConnectionOptions options_;
    std::chrono::milliseconds reaper_interval_;
    std::string identity_;
    std::string held_hash_;
    spdlog::logger& log_;
    redis::Script extend_script_;
    redis::Script release_script_;
    mutable std::mutex mutex_;
    std::map<uint64_t, Held> locks_;  // guarded by mutex_
    uint64_t next_id_ = 1;            // guarded by mutex_
    std::atomic<unsigned long long> reaped_total_{0};
    std::optional<redis::Connection> conn_;  // keeper thread only, from start() to stop()
    DueTime next_reap_;                      // keeper thread only
    std::set<std::string> client_suspects_;  // reaper (keeper thread, or a test): "<digest> <jid>"
                                             // of client locks found stale in its last pass
    DueTime next_alive_;                     // keeper thread only (and start(), before it)
    PeriodicWorker worker_;                  // last: its thread ends before the members it uses go
};

}  // namespace kiqd
