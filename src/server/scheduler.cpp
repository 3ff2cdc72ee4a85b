#include "server/scheduler.hpp"

#include "job/raw_json_object.hpp"

namespace kiqd {
namespace {

// KEYS[1] source zset, KEYS[2] "dead". ARGV[1] member, ARGV[2] score, ARGV[3] dead entry.
constexpr const char* kKillScript = R"lua(
if redis.call('zrem', KEYS[1], ARGV[1]) == 1 then
  redis.call('zadd', KEYS[2], ARGV[2], ARGV[3])
  return 1
end
return 0
)lua";

constexpr size_t kBatch = 100;

}  // namespace

// KEYS[1] source zset, KEYS[2] "queues", KEYS[3] destination list.
// ARGV[1] member, ARGV[2] queue name, ARGV[3] payload to push (member with fresh enqueued_at).
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
      timer_(io_) {}

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

void Scheduler::schedule_next(std::chrono::duration<double> delay) {
    timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(delay));
    timer_.async_wait([this](const boost::system::error_code& ec) {
        if (!ec) poll();
    });
}

void Scheduler::poll() {
    if (rt_.lifecycle.is_quiet()) return;  // Sidekiq stops the poller on quiet
    try {
        const size_t moved = enqueue_due(*conn_, epoch_seconds());
        if (moved) rt_.log.debug("scheduler enqueued {} due jobs", moved);
        if (++polls_ % 10 == 1)
            process_count_ = conn_->command({"SCARD", rt_.keys.processes()}).integer();
        rt_.health.succeeded();
    } catch (const redis::Error& e) {
        rt_.health.failed(e);
    }
    schedule_next(std::chrono::duration<double>(random_poll_interval(process_count_)));
}

void Scheduler::start() {
    conn_ = std::make_unique<redis::Connection>(rt_.connection_options);
    std::uniform_real_distribution<double> r(0.0, 1.0);
    // Sidekiq waits 10 s + rand·5 s before the first poll unless the interval is set explicitly.
    double initial = rt_.config.poll_interval_average
                         ? r(rng_) * std::min(5.0, *rt_.config.poll_interval_average)
                         : 10.0 + r(rng_) * 5.0;
    schedule_next(std::chrono::duration<double>(initial));
    thread_ = std::thread([this] { io_.run(); });
}

void Scheduler::stop() noexcept {
    io_.stop();
    if (thread_.joinable()) thread_.join();
}

}  // namespace kiqd
