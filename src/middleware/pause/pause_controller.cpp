#include "middleware/pause/pause_controller.hpp"

#include <algorithm>

#include "server/connection_budget.hpp"

namespace kiqd {
namespace {

// Takes the fleet-wide resume lock when it is free, or extends it when it is already ours: one
// process keeps resuming round after round.
// KEYS[1] -> the resume lock ("kiqd:pause:resume-lock")
// --
// ARGV[1] -> this process's identity
// ARGV[2] -> the lock's TTL in ms
// Returns 1 when this process holds the lock now, 0 when another one does.
constexpr const char* kLockScript = R"lua(
local holder = redis.call('get', KEYS[1])
if holder == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
if holder then return 0 end
redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
return 1
)lua";

// Gives up the resume lock at stop, so another process takes over without waiting for its TTL;
// only its holder releases it.
// KEYS[1] -> the resume lock ("kiqd:pause:resume-lock")
// --
// ARGV[1] -> this process's identity
// Returns 1 when the lock was released, 0 when it was not this process's.
constexpr const char* kUnlockScript = R"lua(
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
)lua";

std::string describe(const std::unordered_set<std::string>& names) {
    std::vector<std::string> sorted(names.begin(), names.end());
    std::sort(sorted.begin(), sorted.end());
    std::string out;
    for (const auto& n : sorted) out += (out.empty() ? "" : ", ") + n;
    return out.empty() ? "none" : out;
}

}  // namespace

PauseController::PauseController(Runtime& rt, PauseState& state, QueueOrder& order,
                                 const ParkedJobs& parked, const PauseStrategies& strategies)
    : rt_(rt),
      state_(state),
      order_(order),
      parked_(parked),
      strategies_(strategies),
      lock_script_(kLockScript),
      worker_("pause-control", rt.log) {}

PauseController::~PauseController() {
    stop();
}

bool PauseController::refresh(redis::Connection& conn) {
    auto replies = conn.pipeline(
        {{"SMEMBERS", rt_.keys.paused_queues()}, {"SMEMBERS", rt_.keys.paused_workers()}});
    PausedSet next;
    for (size_t i = 0; i < replies[0].size(); ++i) next.queues.emplace(replies[0][i].str());
    for (size_t i = 0; i < replies[1].size(); ++i) next.workers.emplace(replies[1][i].str());
    const auto previous = state_.current();
    for (const auto& [job_class, strategy] : strategies_.by_class()) {
        if (next.workers.count(job_class)) continue;
        bool pause = false;
        try {
            pause = strategy->should_pause(conn);
        } catch (const redis::Error&) {
            throw;  // the connection's problem, not the strategy's: the whole refresh fails
        } catch (const std::exception& e) {
            pause = previous->workers.count(job_class) > 0;
            rt_.log.warn("pause control: strategy of {} failed ({}); keeping {}", job_class,
                         e.what(), pause ? "paused" : "running");
        }
        if (pause) next.workers.insert(job_class);
    }
    order_.set_paused(next.queues);
    for (QueueOrder* other : more_orders_) other->set_paused(next.queues);
    const std::string workers = describe(next.workers), queues = describe(next.queues);
    if (!state_.update(std::move(next))) return false;
    rt_.log.info("pause control: paused workers: {}; paused queues: {}", workers, queues);
    return true;
}

bool PauseController::still_paused(redis::Connection& conn, const PausedSet& paused,
                                   const std::string& job_class,
                                   const std::string& descriptor) const {
    if (paused.workers.count(job_class)) return true;
    if (strategies_.find(job_class)) return false;  // ours, and it said "run" at the refresh
    // A class of another process's config: its stored descriptor decides.
    constexpr std::string_view flag = "redis_flag:";
    if (descriptor.rfind(flag, 0) == 0)
        return RedisFlagPauseStrategy::flag_set(
            conn.command({"GET", descriptor.substr(flag.size())}));
    return descriptor != "manual";  // a custom strategy this process cannot ask
}

long long PauseController::resume_round(redis::Connection& conn, bool* remaining) {
    if (remaining) *remaining = false;
    const auto& cfg = rt_.config.pause_control;
    const auto ttl = std::max<std::chrono::milliseconds>(cfg.resume_interval * 3,
                                                         std::chrono::milliseconds(3000));
    if (lock_script_
            .run(conn, {rt_.keys.pause_resume_lock()}, {rt_.identity, std::to_string(ttl.count())})
            .integer() != 1)
        return -1;
    auto classes = conn.command({"HGETALL", rt_.keys.parked_classes()});
    const auto paused = state_.current();
    long long moved = 0;
    for (size_t i = 0; i + 1 < classes.size(); i += 2) {
        const std::string job_class(classes[i].str());
        const std::string descriptor(classes[i + 1].str());
        if (still_paused(conn, *paused, job_class, descriptor)) continue;
        const auto r = parked_.resume_batch(conn, job_class, static_cast<size_t>(cfg.batch_size));
        moved += static_cast<long long>(r.moved);
        if (r.moved > 0)
            rt_.log.info("pause control: resumed {} parked job(s) of {}", r.moved, job_class);
        if (remaining && r.left > 0) *remaining = true;
    }
    return moved;
}

void PauseController::refresh_before_start() noexcept {
    try {
        redis::Connection conn(
            named_connection(rt_.connection_options, rt_.identity, "pause-control-start"));
        refresh(conn);
    } catch (const redis::Error& e) {
        // The processors and the heartbeat report an outage (once, through RedisHealth); a
        // second reporter with its own connection would make the log flap when Redis returns.
        rt_.log.debug("pause control: could not read what is paused yet: {}", e.what());
    } catch (const std::exception& e) {
        rt_.log.warn("pause control: could not read what is paused yet: {}", e.what());
    }
}

void PauseController::start() {
    const auto& cfg = rt_.config.pause_control;
    conn_.emplace(named_connection(rt_.connection_options, rt_.identity, "pause-control"));
    next_resume_ = DueTime(cfg.resume_interval);
    worker_.start(PeriodicWorker::Duration::zero(), cfg.refresh_interval, [this] { round(); });
}

void PauseController::round() {
    const auto& cfg = rt_.config.pause_control;
    try {
        refresh(*conn_);
        if (next_resume_.reached()) {
            bool remaining = false;
            resume_round(*conn_, &remaining);
            next_resume_.set_in(remaining ? std::min<std::chrono::milliseconds>(
                                                cfg.resume_interval, std::chrono::seconds(1))
                                          : cfg.resume_interval);
        }
    } catch (const redis::Error& e) {
        // Redis is down: the last known state stays in force. The outage is reported once
        // by the processors and the heartbeat (RedisHealth), not again here.
        rt_.log.debug("pause control: {}", e.what());
    } catch (const std::exception& e) {
        rt_.log.warn("pause control: {}", e.what());
    }
}

void PauseController::stop() noexcept {
    if (!worker_.stop()) return;  // never started, or already stopped
    try {
        redis::Script(kUnlockScript).run(*conn_, {rt_.keys.pause_resume_lock()}, {rt_.identity});
    } catch (const std::exception&) {
        // It expires by its TTL.
    }
    conn_.reset();  // the connection closes with the thread
}

}  // namespace kiqd
