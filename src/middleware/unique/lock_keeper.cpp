#include "middleware/unique/lock_keeper.hpp"

#include <cmath>
#include <set>
#include <vector>

#include "common/outcome_counters.hpp"
#include "common/random_hex.hpp"
#include "kiqd/clock.hpp"
#include "middleware/unique/lock_survey.hpp"

namespace kiqd {
namespace {

// Extends an EXEC lock only while it still holds this owner's token: a lock that expired and
// was taken by another job is left alone.
// KEYS[1] -> the EXEC lock
// --
// ARGV[1] -> the owner ("<identity> <token>") this process set it to
// ARGV[2] -> the TTL in ms
// Returns 1 when the lock was extended, 0 when it is gone or held by someone else.
constexpr const char* kExtendScript = R"lua(
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
)lua";

// Frees an EXEC lock if `owner` still holds it, and forgets it in the held hash (the reaper's
// list) if the entry is still this owner's.
// KEYS[1] -> the EXEC lock
// KEYS[2] -> the held hash (`kiqd:unique:held`: EXEC key -> owner)
// --
// ARGV[1] -> the owner ("<identity> <token>")
// Returns 1 when the lock was freed, 0 when it had expired or belongs to someone else. Both
// reads come before the first write, so a key of the wrong type fails the script before it has
// written anything (Redis keeps the writes made before a failing command).
constexpr const char* kReleaseScript = KIQD_LOCK_RELEASE_LUA R"lua(
return release_lock(KEYS[1], KEYS[2], ARGV[1])
)lua";

constexpr auto kLockTick = std::chrono::milliseconds(500);

}  // namespace

std::vector<bool> LockKeeper::identities_alive(redis::Connection& conn, const Keys& keys,
                                               const std::vector<std::string>& identities) {
    // Alive while any of its three records exists: the heartbeat's (absent before the first
    // beat and after an outage of more than 60 s), the keeper's own, reliable fetch's.
    std::vector<redis::Command> checks;
    for (const auto& id : identities)
        checks.push_back({"EXISTS", keys.process(id), keys.unique_alive(id), keys.alive(id)});
    std::vector<bool> alive;
    if (checks.empty()) return alive;
    auto replies = conn.pipeline(checks);
    for (const auto& r : replies) alive.push_back(r.integer() > 0);
    return alive;
}

std::string LockKeeper::new_owner(const std::string& identity) {
    // "<identity> <16 hex>@<seconds>.<milliseconds>", built by hand from integers: formatting
    // was most of this function's cost, and it runs once per lock taken.
    const long long ms = std::llround(epoch_seconds() * 1000.0);
    std::string out;
    out.reserve(identity.size() + 40);
    out += identity;
    out += ' ';
    out += random_hex(16);
    out += '@';
    out += std::to_string(ms / 1000);
    out += '.';
    const int frac = static_cast<int>(ms % 1000);
    out += static_cast<char>('0' + frac / 100);
    out += static_cast<char>('0' + frac / 10 % 10);
    out += static_cast<char>('0' + frac % 10);
    return out;
}

std::optional<double> LockKeeper::owner_since(const std::string& owner) {
    const auto at = owner.rfind('@');
    if (at == std::string::npos || at < owner.rfind(' ')) return std::nullopt;
    try {
        return std::stod(owner.substr(at + 1));
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

const char* LockKeeper::release_script_source() {
    return kReleaseScript;
}

LockKeeper::LockKeeper(const Keys& keys, redis::ConnectionOptions options,
                       std::chrono::milliseconds reaper_interval, std::string identity,
                       spdlog::logger& log)
    : keys_(keys),
      options_(std::move(options)),
      reaper_interval_(reaper_interval),
      identity_(std::move(identity)),
      held_hash_(keys.unique_held()),
      log_(log),
      extend_script_(kExtendScript),
      release_script_(kReleaseScript),
      worker_("lock-keeper", log) {}

LockKeeper::~LockKeeper() {
    stop();
}

void LockKeeper::start() {
    conn_.emplace(options_);
    next_reap_ = DueTime(reaper_interval_);
    // Before the launcher starts a processor: a lock taken before the first heartbeat must not
    // look like a dead owner's. Redis down now: the first round that reaches it writes it.
    try {
        mark_alive(*conn_);
    } catch (const redis::Error& e) {
        log_.debug("unique locks: liveness not written yet: {}", e.what());
    }
    worker_.start(kLockTick, kLockTick, [this] { round(); });
}

void LockKeeper::stop() noexcept {
    worker_.stop();
    if (conn_) {
        // A clean exit: the locks left (jobs that ignored the stop) can be reaped at once.
        try {
            conn_->command({"DEL", keys_.unique_alive(identity_)});
        } catch (const std::exception&) {
        }
    }
    conn_.reset();  // the connection closes with the thread
}

void LockKeeper::mark_alive(redis::Connection& conn) {
    conn.command({"SET", keys_.unique_alive(identity_), "1", "PX",
                  std::to_string(std::chrono::milliseconds(kLivenessTtl).count())});
    next_alive_ = DueTime(kLivenessRefresh);
}

std::string LockKeeper::owner_identity(const std::string& owner) {
    const auto space = owner.rfind(' ');
    return space == std::string::npos ? owner : owner.substr(0, space);
}

uint64_t LockKeeper::hold(std::string key, std::string owner, std::chrono::milliseconds ttl) {
    std::lock_guard lock(mutex_);
    const uint64_t id = next_id_++;
    locks_[id] = Held{std::move(key), std::move(owner), ttl, std::chrono::steady_clock::now()};
    return id;
}

void LockKeeper::release(uint64_t id) {
    std::lock_guard lock(mutex_);
    locks_.erase(id);
}

size_t LockKeeper::held() const {
    std::lock_guard lock(mutex_);
    return locks_.size();
}

size_t LockKeeper::extend_due(redis::Connection& conn, bool all) {
    const auto now = std::chrono::steady_clock::now();
    std::vector<std::pair<uint64_t, Held>> due;
    {
        std::lock_guard lock(mutex_);
        for (const auto& [id, h] : locks_)
            if (all || now - h.extended >= h.ttl / 3) due.emplace_back(id, h);
    }
    size_t extended = 0;
    for (const auto& [id, h] : due) {
        auto r = extend_script_.run(conn, {h.key}, {h.owner, std::to_string(h.ttl.count())});
        if (r.integer() == 1) {
            ++extended;
        } else {
            // Expired (this process stalled longer than the TTL) or reaped: say so once; the
            // job keeps running, but another copy may start.
            log_.warn("unique lock {} was lost while its job ran (TTL {} ms)", h.key,
                      h.ttl.count());
        }
        std::lock_guard lock(mutex_);
        auto it = locks_.find(id);
        if (it != locks_.end()) it->second.extended = now;
    }
    return extended;
}

size_t LockKeeper::reap(redis::Connection& conn, bool take_lock) {
    if (take_lock) {
        auto won = conn.command({"SET", keys_.unique_reaper_lock(), identity_, "NX", "PX",
                                 std::to_string(reaper_interval_.count())});
        if (won.is_nil()) return 0;
    }
    const size_t reaped = reap_run_locks(conn) + reap_client_locks(conn);
    reaped_total_.fetch_add(reaped);
    outcome_counters().unique_locks_reaped.fetch_add(reaped, std::memory_order_relaxed);
    return reaped;
}

size_t LockKeeper::reap_client_locks(redis::Connection& conn) {
    // A client lock whose jid is in none of the places a job can be (lock_survey.hpp) in this
    // pass AND the previous one, at least one interval apart, is freed: a job on its way
    // between two places (a fetch, a retry being scheduled, a batch in a process's memory)
    // shows up again by the next pass.
    std::map<std::string, std::string> stale;  // "<digest> <jid>" → digest
    for (const auto& l : survey_unique_locks(conn, keys_))
        if (l.kind == "client" && !l.alive) stale.emplace(l.digest + " " + l.holder, l.digest);
    size_t reaped = 0;
    for (const auto& [entry, digest] : stale) {
        if (!client_suspects_.count(entry)) continue;
        const std::string jid = entry.substr(digest.size() + 1);
        if (free_client_holder(conn, keys_, digest, jid) == 1) {
            ++reaped;
            log_.warn(
                "unique client lock {} released: its holder jid {} is in no queue, set or "
                "process",
                digest, jid);
        }
    }
    client_suspects_.clear();
    for (const auto& [entry, digest] : stale) client_suspects_.insert(entry);
    return reaped;
}

size_t LockKeeper::reap_run_locks(redis::Connection& conn) {
    auto held = conn.command({"HGETALL", held_hash_});
    std::vector<std::pair<std::string, std::string>> entries;  // lock key, owner
    std::set<std::string> identities;
    for (size_t i = 0; i + 1 < held.size(); i += 2) {
        if (is_marker(held[i].str())) continue;
        std::string owner(held[i + 1].str());
        identities.insert(owner_identity(owner));
        entries.emplace_back(std::string(held[i].str()), std::move(owner));
    }
    if (entries.empty()) return 0;
    const std::vector<std::string> ids(identities.begin(), identities.end());
    const auto alive = identities_alive(conn, keys_, ids);
    std::set<std::string> gone;
    for (size_t i = 0; i < ids.size(); ++i)
        if (!alive[i]) gone.insert(ids[i]);
    size_t reaped = 0;
    for (const auto& [key, owner] : entries) {
        const auto id = owner_identity(owner);
        if (!gone.count(id)) continue;
        if (release_script_.run(conn, {key, held_hash_}, {owner}).integer() == 1) {
            ++reaped;
            log_.warn("unique lock {} released: its owner {} is gone", key, id);
        }
    }
    return reaped;
}

void LockKeeper::round() {
    try {
        if (next_alive_.reached()) mark_alive(*conn_);
        extend_due(*conn_);
        if (next_reap_.reached()) {
            next_reap_.set_in(reaper_interval_);
            reap(*conn_);
        }
    } catch (const redis::Error& e) {
        // Redis may have been away longer than the liveness TTL: refresh it first next round.
        next_alive_ = DueTime();
        log_.debug("unique locks: keeper round failed: {}", e.what());
    } catch (const std::exception& e) {
        log_.error("unique locks: keeper error: {}", e.what());
    }
}

}  // namespace kiqd
