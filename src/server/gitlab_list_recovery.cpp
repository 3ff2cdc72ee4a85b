#include "server/gitlab_list_recovery.hpp"

#include <fmt/format.h>

#include <regex>

#include "job/raw_json_object.hpp"

namespace kiqd {
namespace {

// The gem's defaults (base_reliable_fetch.rb, interrupted_set.rb).
constexpr long long kMaxRetriesAfterInterruption = 3;
constexpr long long kInterruptedMaxJobs = 10000;
constexpr double kInterruptedTimeout = 90.0 * 24 * 3600;

// KEYS: the working list, the destination (the queue's list, or the interrupted set).
// ARGV: the job as read at the list's end, the job to write, "queue" or "interrupted", now
// (epoch seconds), the oldest score the interrupted set keeps, its size limit.
// 0: the job is no longer at the list's end (another cleaner took it).
constexpr const char* kMove = R"lua(
if redis.call('lindex', KEYS[1], -1) ~= ARGV[1] then return 0 end
redis.call('rpop', KEYS[1])
if ARGV[3] == 'queue' then
  redis.call('lpush', KEYS[2], ARGV[2])
else
  redis.call('zadd', KEYS[2], ARGV[4], ARGV[2])
  redis.call('zremrangebyscore', KEYS[2], '-inf', ARGV[5])
  redis.call('zremrangebyrank', KEYS[2], 0, -tonumber(ARGV[6]))
end
return 1
)lua";

double epoch_now() {
    using namespace std::chrono;
    return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::optional<long long> whole_number(const RawJsonObject& job, std::string_view key) {
    const std::string* raw = job.find(key);
    if (!raw) return std::nullopt;
    try {
        size_t used = 0;
        const long long v = std::stoll(*raw, &used);
        if (used == raw->size()) return v;
    } catch (const std::exception&) {
    }
    return std::nullopt;
}

}  // namespace

GitlabListRecovery::GitlabListRecovery(const Keys& keys, redis::ConnectionOptions options,
                                       std::chrono::milliseconds interval, spdlog::logger& log)
    : keys_(keys),
      options_(std::move(options)),
      interval_(interval),
      log_(log),
      move_(kMove),
      worker_("gitlab-lists", log) {}

GitlabListRecovery::~GitlabListRecovery() {
    stop();
}

void GitlabListRecovery::start() {
    worker_.start(std::chrono::seconds(0), interval_, [this] { round(); });
}

void GitlabListRecovery::stop() {
    worker_.stop();
}

void GitlabListRecovery::round() {
    try {
        if (!conn_) conn_ = std::make_unique<redis::Connection>(options_);
        const Counts c = pass(*conn_);
        if (c.lists > 0)
            log_.info(
                "gitlab-sidekiq-fetcher: {} working list(s) of processes that are gone: {} job(s) "
                "back in their queues, {} to the interrupted set",
                c.lists, c.requeued, c.quarantined);
    } catch (const redis::Error& e) {
        conn_.reset();
        log_.debug("gitlab-sidekiq-fetcher lists: {}", e.what());
    }
}

GitlabListRecovery::Counts GitlabListRecovery::pass(redis::Connection& conn) {
    // working:queue:NAME:HOST:PID:NONCE, or the gem's older working:queue:NAME:HOST:PID.
    static const std::regex current(R"(^working:(queue:.*):([^:]*:[0-9]*:[0-9a-f]*)$)");
    static const std::regex legacy(R"(^working:(queue:.*):([^:]*:[0-9]*)$)");
    const std::string& prefix = keys_.prefix();  // "" or "ns:"
    Counts counts;
    std::string cursor = "0";
    do {
        const auto page =
            conn.command({"SCAN", cursor, "MATCH", prefix + "working:queue:*", "COUNT", "1000"});
        cursor = std::string(page[0].str());
        for (size_t i = 0; i < page[1].size(); ++i) {
            const std::string list = *page[1][i].optional_str();
            const std::string name = list.substr(prefix.size());
            std::smatch m;
            if (!std::regex_match(name, m, current) && !std::regex_match(name, m, legacy)) continue;
            std::string identity = m[2];
            for (auto& ch : identity)
                if (ch == ':') ch = '-';
            const auto beat =
                conn.command({"GET", prefix + "reliable-fetcher-heartbeat-" + identity});
            if (!beat.is_nil()) continue;  // its process is alive
            ++counts.lists;
            drain(conn, list, prefix + std::string(m[1]), counts);
        }
    } while (cursor != "0");
    return counts;
}

void GitlabListRecovery::drain(redis::Connection& conn, const std::string& list,
                               const std::string& queue_key, Counts& counts) {
    const std::string interrupted = keys_.prefix() + "interrupted";
    for (;;) {
        const auto end = conn.command({"LINDEX", list, "-1"});
        if (end.is_nil()) return;
        const std::string job(end.str());
        std::string out = job;
        bool quarantine = false;
        // A payload that is not a JSON object goes back as it is: kiqd's processor then sends
        // it to the dead set with the reason, its bytes kept.
        if (auto obj = RawJsonObject::parse(job)) {
            const long long count = whole_number(*obj, "interrupted_count").value_or(0) + 1;
            obj->set("interrupted_count", std::to_string(count));
            const long long max = whole_number(*obj, "max_retries_after_interruption")
                                      .value_or(kMaxRetriesAfterInterruption);
            quarantine = max >= 0 && count >= max;
            out = obj->dump();
        }
        const double now = epoch_now();
        const auto moved =
            move_.run(conn, {list, quarantine ? interrupted : queue_key},
                      {job, out, quarantine ? "interrupted" : "queue", fmt::format("{:.6f}", now),
                       fmt::format("{:.6f}", now - kInterruptedTimeout),
                       std::to_string(kInterruptedMaxJobs)});
        if (moved.integer() == 0) continue;  // taken by another cleaner: read the end again
        if (quarantine) {
            ++counts.quarantined;
            log_.warn(
                "gitlab-sidekiq-fetcher: a job of {} was interrupted too often: moved to the "
                "interrupted set",
                queue_key);
        } else {
            ++counts.requeued;
        }
    }
}

}  // namespace kiqd
