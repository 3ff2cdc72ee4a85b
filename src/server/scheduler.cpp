#include "server/scheduler.hpp"

#include <algorithm>

#include "common/outcome_counters.hpp"
#include "job/raw_json_object.hpp"
#include "kiqd/deadline.hpp"
#include "redis/lua_type_guard.hpp"
#include "server/connection_budget.hpp"

namespace kiqd {
namespace {

constexpr size_t kBatch = 100;

}  // namespace

// Moves a member from its sorted set to the dead set, only if this call removed it, so two
// schedulers (or an admin and a scheduler) never add it twice. The scheduler sends members that
// cannot be enqueued (not a JSON object); `kiqd retries kill` sends retries. When the dead set's
// key holds another type, nothing is written (the member stays) and the reply is a WRONGTYPE error
// (lua_type_guard.hpp).
// KEYS[1] -> the source sorted set ("retry" or "schedule")
// KEYS[2] -> the dead set ("dead")
// --
// ARGV[1] -> the member, as read from KEYS[1]
// ARGV[2] -> its score in the dead set (now, epoch seconds)
// ARGV[3] -> the dead-set entry (the member, or it wrapped with the error that sent it there)
// Returns 1 when this call moved it, 0 when it was no longer in KEYS[1].
const char* const kMoveToDeadScript = KIQD_LUA_TYPE_GUARD R"lua(
local refused = wrong_type({KEYS[2], 'zset'})
if refused then return refused end
if redis.call('zrem', KEYS[1], ARGV[1]) == 1 then
  redis.call('zadd', KEYS[2], ARGV[2], ARGV[3])
  return 1
end
return 0
)lua";

// Moves a due member from its sorted set onto its queue, only if this call removed it.
// KEYS[1] -> the source sorted set ("retry" or "schedule")
// KEYS[2] -> the "queues" set
// KEYS[3] -> the destination queue list ("queue:<name>")
// --
// ARGV[1] -> the member, as read from KEYS[1]
// ARGV[2] -> the queue name (added to KEYS[2])
// ARGV[3] -> the payload to push: the member with a fresh enqueued_at
// Returns 1 when this call moved it, 0 when it was no longer in KEYS[1] (another process or
// an earlier try moved it), and a WRONGTYPE error, with nothing written and the member still in
// KEYS[1], when KEYS[2] is not a set or KEYS[3] not a list (lua_type_guard.hpp): Redis does not
// undo a ZREM when the LPUSH after it fails, so the types are checked before the first write.
const char* const kMoveToQueueScript = KIQD_LUA_TYPE_GUARD R"lua(
local refused = wrong_type({KEYS[2], 'set', KEYS[3], 'list'})
if refused then return refused end
if redis.call('zrem', KEYS[1], ARGV[1]) == 1 then
  redis.call('sadd', KEYS[2], ARGV[2])
  redis.call('lpush', KEYS[3], ARGV[3])
  return 1
end
return 0
)lua";

Scheduler::Scheduler(Runtime& rt)
    : rt_(rt),
      move_script_(kMoveToQueueScript),
      kill_script_(kMoveToDeadScript),
      rng_(std::random_device{}()),
      worker_("scheduler", rt.log) {}

Scheduler::~Scheduler() {
    stop();
}

size_t Scheduler::enqueue_due(redis::Connection& conn, double now) {
    size_t moved = 0;
    const std::string now_score = score_text(now);
    std::map<std::string, size_t> refused;  // a move's WRONGTYPE error → due members it held up
    for (const auto& set : {rt_.keys.retry(), rt_.keys.schedule()}) {
        size_t left_in_place = 0;  // refused members of this set: the next page starts after them
        for (;;) {
            auto due = conn.command({"ZRANGEBYSCORE", set, "-inf", now_score, "LIMIT",
                                     std::to_string(left_in_place), std::to_string(kBatch)});
            const size_t n = due.size();
            if (n == 0) break;
            if (!scripts_loaded_) {
                move_script_.load(conn);
                kill_script_.load(conn);
                scripts_loaded_ = true;
            }
            std::vector<redis::Command> moves;
            for (size_t i = 0; i < n; ++i) {
                const std::string member(due[i].str());
                std::string error;
                auto obj = RawJsonObject::parse(member, &error);
                if (!obj) {
                    increment(outcome_counters().unrunnable);
                    increment(outcome_counters().dead);
                    rt_.log.error("{}: member is not a JSON object ({}); moved to the dead set",
                                  set, error);
                    moves.push_back(kill_script_.evalsha_command(
                        {set, rt_.keys.dead()},
                        {member, now_score,
                         rt_.dead.invalid_entry(member, "default", {"JSON::ParserError", error})}));
                    continue;
                }
                std::string queue = "default";
                if (auto* q = obj->find("queue")) {
                    auto parsed = nlohmann::json::parse(*q, nullptr, false);
                    if (parsed.is_string()) queue = parsed.get<std::string>();
                }
                obj->set("enqueued_at", payload_timestamp(rt_.config.compat, now));
                moves.push_back(move_script_.evalsha_command(
                    {set, rt_.keys.queues(), rt_.keys.queue(queue)}, {member, queue, obj->dump()}));
            }
            auto replies = conn.pipeline_unchecked(moves);
            auto error_with = [&](std::string_view prefix) {
                return std::any_of(replies.begin(), replies.end(), [&](const redis::Reply& r) {
                    return r.is_error() && r.error_text().substr(0, prefix.size()) == prefix;
                });
            };
            if (error_with("NOSCRIPT")) {
                // A restarted Redis has an empty script cache. Every move is guarded by its ZREM,
                // so running the batch again after reloading cannot enqueue anything twice.
                scripts_loaded_ = false;
                continue;
            }
            for (const auto& r : replies) {
                if (!r.is_error()) {
                    moved += r.integer() == 1 ? 1 : 0;
                    continue;
                }
                // A destination of the wrong type: the script wrote nothing, the member stays.
                if (r.error_text().substr(0, 9) != "WRONGTYPE")
                    throw redis::ReplyError(std::string(r.error_text()));
                ++refused[std::string(r.error_text())];
                ++left_in_place;
            }
            if (n < kBatch || rt_.lifecycle.is_quiet()) break;
        }
    }
    report_refusals(refused);
    return moved;
}

void Scheduler::report_refusals(const std::map<std::string, size_t>& refused) {
    for (const auto& [error, count] : refused)
        if (!refusing_.count(error))
            rt_.log.error(
                "scheduler: Redis refused to enqueue {} due job(s); they stay in the retry or "
                "schedule set until this is fixed: {}",
                count, error);
    for (const auto& error : refusing_)
        if (!refused.count(error))
            rt_.log.info("scheduler: due jobs are no longer held up by: {}", error);
    refusing_.clear();
    for (const auto& [error, count] : refused) refusing_.insert(error);
}

double Scheduler::random_poll_interval(long long process_count) {
    std::uniform_real_distribution<double> r(0.0, 1.0);
    if (rt_.config.poll_interval_average) {
        const double avg = *rt_.config.poll_interval_average;
        return avg * r(rng_) + avg / 2;
    }
    // Every process polls; spreading the polls over count × average keeps the cluster-wide rate
    // near one poll per average interval (Sidekiq's thundering-herd reasoning).
    const double avg = static_cast<double>(std::max(1LL, process_count)) *
                       rt_.config.average_scheduled_poll_interval;
    return process_count < 10 ? avg * r(rng_) + avg / 2 : avg * r(rng_);
}

void Scheduler::poll() {
    // Sidekiq stops the poller on quiet: from then on the rounds do nothing until stop().
    if (rt_.lifecycle.is_quiet()) return;
    try {
        const auto started = RedisHealth::Clock::now();
        const size_t moved = enqueue_due(*conn_, epoch_seconds());
        if (moved) rt_.log.debug("scheduler enqueued {} due jobs", moved);
        if (++polls_ % 10 == 1)
            process_count_ = conn_->command({"SCARD", rt_.keys.processes()}).integer();
        rt_.health.succeeded(started);
    } catch (const redis::Error& e) {
        rt_.health.failed(e);
    }
}

void Scheduler::start() {
    conn_ = std::make_unique<redis::Connection>(
        named_connection(rt_.connection_options, rt_.identity, "scheduler"));
    const auto seconds = [](double s) {
        // An average interval times many processes can exceed any clock: saturate.
        return saturating_cast<PeriodicWorker::Duration>(std::chrono::duration<double>(s));
    };
    std::uniform_real_distribution<double> r(0.0, 1.0);
    // Sidekiq waits 10 s + rand·5 s before the first poll unless the interval is set explicitly.
    double initial = rt_.config.poll_interval_average
                         ? r(rng_) * std::min(5.0, *rt_.config.poll_interval_average)
                         : 10.0 + r(rng_) * 5.0;
    worker_.start(
        seconds(initial), [this, seconds] { return seconds(random_poll_interval(process_count_)); },
        [this] { poll(); });
}

void Scheduler::stop() noexcept {
    worker_.stop();
}

}  // namespace kiqd
