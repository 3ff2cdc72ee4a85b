#include "middleware/limits/slot_keeper.hpp"

#include <vector>

#include "middleware/limits/concurrency_scripts.hpp"

namespace kiqd {
namespace {

// Pushes the expiry of every slot this process holds TTL ahead of Redis's clock, in one call,
// while the slot exists (a slot that expired or was taken back is not resurrected: another job
// may hold it now).
// KEYS[i] -> the slots sorted set of the i-th slot's scope ("kiqd:concurrency:<scope>:slots")
// --
// ARGV[1]     -> the slot TTL in ms
// ARGV[i + 1] -> the member held in KEYS[i] ("<identity>|<jid>|<token>")
// Returns an array with one entry per key: 1 when that slot was extended, 0 when it was gone.
constexpr const char* kExtendSlotsScript = R"lua(
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('time')
local exp = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
local out = {}
for i, key in ipairs(KEYS) do
  if redis.call('zscore', key, ARGV[i + 1]) then
    redis.call('zadd', key, exp, ARGV[i + 1])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
)lua";

constexpr auto kSlotTick = std::chrono::milliseconds(250);

}  // namespace

SlotKeeper::SlotKeeper(const Keys& keys, redis::ConnectionOptions options,
                       ConcurrencyLimitsConfig config, std::string identity, spdlog::logger& log)
    : keys_(keys),
      options_(std::move(options)),
      config_(config),
      identity_(std::move(identity)),
      log_(log),
      extend_script_(kExtendSlotsScript),
      check_script_(concurrency_check_script()),
      worker_("slot-keeper", log) {}

SlotKeeper::~SlotKeeper() {
    stop();
}

void SlotKeeper::start() {
    conn_.emplace(options_);
    next_check_ = DueTime(config_.check_interval);
    worker_.start(kSlotTick, kSlotTick, [this] { round(); });
}

void SlotKeeper::stop() noexcept {
    worker_.stop();
    conn_.reset();  // the connection closes with the thread
}

uint64_t SlotKeeper::hold(std::string slots_key, std::string member) {
    std::lock_guard lock(mutex_);
    const uint64_t id = next_id_++;
    slots_[id] = Held{std::move(slots_key), std::move(member), std::chrono::steady_clock::now()};
    return id;
}

void SlotKeeper::release(uint64_t id) {
    std::lock_guard lock(mutex_);
    slots_.erase(id);
}

size_t SlotKeeper::held() const {
    std::lock_guard lock(mutex_);
    return slots_.size();
}

size_t SlotKeeper::extend_due(redis::Connection& conn, bool all) {
    const auto now = std::chrono::steady_clock::now();
    std::vector<uint64_t> ids;
    std::vector<std::string> keys;
    std::vector<std::string> args{std::to_string(config_.slot_ttl.count())};
    {
        std::lock_guard lock(mutex_);
        for (const auto& [id, h] : slots_) {
            if (!all && now - h.extended < config_.slot_ttl / 3) continue;
            ids.push_back(id);
            keys.push_back(h.key);
            args.push_back(h.member);
        }
    }
    if (ids.empty()) return 0;
    auto reply = extend_script_.run(conn, keys, args);
    size_t extended = 0;
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i < reply.size() && reply[i].integer() == 1) {
            ++extended;
        } else {
            // This process stalled (or Redis was unreachable) longer than slot_ttl: the slot
            // was given to another job. The job keeps running; the limit may be exceeded once.
            log_.warn("concurrency slot {} in {} expired while its job ran (slot_ttl {} ms)",
                      args[i + 1], keys[i], config_.slot_ttl.count());
        }
        auto it = slots_.find(ids[i]);
        if (it != slots_.end()) it->second.extended = now;
    }
    return extended;
}

size_t SlotKeeper::check(redis::Connection& conn, bool take_lock) {
    if (take_lock) {
        auto won = conn.command({"SET", keys_.concurrency_check_lock(), identity_, "NX", "PX",
                                 std::to_string(config_.check_interval.count())});
        if (won.is_nil()) return 0;
    }
    auto scopes = conn.command({"HGETALL", keys_.concurrency_scopes()});
    size_t moved = 0;
    for (size_t i = 0; i + 1 < scopes.size(); i += 2) {
        const std::string scope(scopes[i].str());
        const std::string limit(scopes[i + 1].str());
        const auto n =
            check_script_
                .run(conn,
                     {keys_.concurrency_slots(scope), keys_.concurrency_waiting(scope),
                      keys_.concurrency_scopes()},
                     {limit, std::to_string(config_.slot_ttl.count()), keys_.prefix(), scope})
                .integer();
        if (n > 0) log_.info("concurrency limit {}: {} parked job(s) moved back", scope, n);
        moved += static_cast<size_t>(n);
    }
    return moved;
}

void SlotKeeper::round() {
    try {
        extend_due(*conn_);
        if (next_check_.reached()) {
            next_check_.set_in(config_.check_interval);
            check(*conn_);
        }
    } catch (const redis::Error& e) {
        log_.debug("concurrency limits: keeper round failed: {}", e.what());
    } catch (const std::exception& e) {
        log_.error("concurrency limits: keeper error: {}", e.what());
    }
}

}  // namespace kiqd
