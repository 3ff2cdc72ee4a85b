#include "server/scheduler.hpp"

#include "job/raw_json_object.hpp"

namespace kiqd {
namespace {

// Moves a member that cannot be enqueued (not a JSON object) from its sorted set to the dead set,
// only if this call removed it, so two schedulers never add it twice.
// KEYS[1] -> the source sorted set ("retry" or "schedule")
// KEYS[2] -> the dead set ("dead")
// --
// ARGV[1] -> the member, as read from KEYS[1]
// ARGV[2] -> its score in the dead set (now, epoch seconds)
// ARGV[3] -> the dead-set entry (the member wrapped with the error that sent it there)
// Returns 1 when this call moved it, 0 when it was no longer in KEYS[1].
constexpr const char* kKillScript = R"lua(
if redis.call('zrem', KEYS[1], ARGV[1]) == 1 then
  redis.call('zadd', KEYS[2], ARGV[2], ARGV[3])
  return 1
end
return 0
)lua";

constexpr size_t kBatch = 100;

}  // namespace

// Moves a due member from its sorted set onto its queue, only if this call removed it.
// KEYS[1] -> the source sorted set ("retry" or "schedule")
// KEYS[2] -> the "queues" set
// KEYS[3] -> the destination queue list ("queue:<name>")
// --
// ARGV[1] -> the member, as read from KEYS[1]
// ARGV[2] -> the queue name (added to KEYS[2])
// ARGV[3] -> the payload to push: the member with a fresh enqueued_at
// Returns 1 when this call moved it, 0 when it was no longer in KEYS[1] (another process or
// an earlier try moved it).
const char* const kMoveToQueueScript = R"lua(
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
      kill_script_(kKillScript),
      rng_(std::random_device{}()),
      worker_("scheduler", rt.log) {}

Scheduler::~Scheduler() {
    stop();
}

size_t Scheduler::enqueue_due(redis::Connection& conn, double now) {
    size_t moved = 0;
    const std::string now_score = score_text(now);
    for (const auto& set : {rt_.keys.retry(), rt_.keys.schedule()}) {
        for (;;) {
            auto due = conn.command(
                {"ZRANGEBYSCORE", set, "-inf", now_score, "LIMIT", "0", std::to_string(kBatch)});
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
            std::vector<redis::Reply> replies;
            try {
                replies = conn.pipeline(moves);
            } catch (const redis::ReplyError& e) {
                // A restarted Redis has an empty script cache. Every move is guarded by its ZREM,
                // so running the batch again after reloading cannot enqueue anything twice.
                if (!e.starts_with("NOSCRIPT")) throw;
                scripts_loaded_ = false;
                continue;
            }
            for (const auto& r : replies) moved += r.integer() == 1 ? 1 : 0;
            if (n < kBatch || rt_.lifecycle.is_quiet()) break;
        }
    }
    return moved;
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
        const size_t moved = enqueue_due(*conn_, epoch_seconds());
        if (moved) rt_.log.debug("scheduler enqueued {} due jobs", moved);
        if (++polls_ % 10 == 1)
            process_count_ = conn_->command({"SCARD", rt_.keys.processes()}).integer();
        rt_.health.succeeded();
    } catch (const redis::Error& e) {
        rt_.health.failed(e);
    }
}

void Scheduler::start() {
    conn_ = std::make_unique<redis::Connection>(rt_.connection_options);
    const auto seconds = [](double s) {
        return std::chrono::duration_cast<PeriodicWorker::Duration>(
            std::chrono::duration<double>(s));
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
