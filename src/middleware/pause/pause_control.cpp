#include "middleware/pause/pause_control.hpp"

#include <cctype>
#include <nlohmann/json.hpp>

#include "common/outcome_counters.hpp"
#include "job/raw_json_object.hpp"
#include "redis/lua_type_guard.hpp"
#include "redis/transaction.hpp"

namespace kiqd {
namespace {

// Parks one job of a paused class after the class's other parked jobs. Leaving the working list
// in the same step means a crash right after parking cannot also recover the job to its queue
// (and run it twice).
//
// KEYS[1] the class's parked-jobs ZSET (sidekiq:pause_control:paused_jobs:zset:{<worker>})
// KEYS[2] its score counter (sidekiq:pause_control:paused_jobs:score:{<worker>}), INCRed
// KEYS[3] the parked-classes hash (kiqd:pause:parked, class → strategy descriptor)
// KEYS[4] optional (reliable fetch): the working list that holds the job; one copy of ARGV[1]
//         is removed from it
// ARGV[1] the job's payload, byte for byte (the ZSET member)
// ARGV[2] the job class (the field in KEYS[3])
// ARGV[3] the class's pause-strategy descriptor (the value in KEYS[3])
//
// Returns the job's new score (the counter's new value). A payload that is already parked is
// not added twice: it gets the new score and so moves behind the others. A WRONGTYPE error, and
// nothing written, when KEYS[1], KEYS[3] or KEYS[4] holds another type (lua_type_guard.hpp).
constexpr const char* kParkScript = KIQD_LUA_TYPE_GUARD R"lua(
local checks = {KEYS[1], 'zset', KEYS[3], 'hash'}
if KEYS[4] then
  checks[5] = KEYS[4]
  checks[6] = 'list'
end
local refused = wrong_type(checks)
if refused then return refused end
local score = redis.call('incr', KEYS[2])
redis.call('zadd', KEYS[1], score, ARGV[1])
redis.call('hset', KEYS[3], ARGV[2], ARGV[3])
if KEYS[4] then redis.call('lrem', KEYS[4], 1, ARGV[1]) end
return score
)lua";

// Moves a batch of a resumed class's parked jobs back to their queues, in the given order. Each
// job moves only if this call removed it from the ZSET, so a batch run twice (a retry after a
// lost reply) moves nothing twice.
//
// KEYS[1] the class's parked-jobs ZSET
// KEYS[2] its score counter
// KEYS[3] the parked-classes hash
// KEYS[4] the `queues` set
// ARGV[1] the job class (its field in KEYS[3])
// ARGV[2] the key prefix: each job is LPUSHed to ARGV[2] .. "queue:" .. <its queue>, a key the
//         script builds itself (not among KEYS)
// then one triple per job, i = 3, 6, 9, …:
// ARGV[i]   its member in KEYS[1], byte for byte (ZREMed)
// ARGV[i+1] its queue name (SADDed to KEYS[4])
// ARGV[i+2] the payload to push (the member with a fresh enqueued_at)
// No triple at all is fine: the call then only removes the class's keys if its ZSET is empty.
//
// Returns {moved, left}: how many jobs this call moved, and how many stay parked (ZCARD of
// KEYS[1]). When none is left, KEYS[2] is deleted and ARGV[1] removed from KEYS[3]. A WRONGTYPE
// error, and nothing written (every job stays parked), when KEYS[3], KEYS[4] or a job's queue
// key holds another type: Redis keeps the ZREM when the LPUSH after it fails.
constexpr const char* kResumeScript = KIQD_LUA_TYPE_GUARD R"lua(
local checks = {KEYS[3], 'hash', KEYS[4], 'set'}
for i = 3, #ARGV, 3 do
  checks[#checks + 1] = ARGV[2] .. 'queue:' .. ARGV[i + 1]
  checks[#checks + 1] = 'list'
end
local refused = wrong_type(checks)
if refused then return refused end
local moved = 0
for i = 3, #ARGV, 3 do
  if redis.call('zrem', KEYS[1], ARGV[i]) == 1 then
    redis.call('sadd', KEYS[4], ARGV[i + 1])
    redis.call('lpush', ARGV[2] .. 'queue:' .. ARGV[i + 1], ARGV[i + 2])
    moved = moved + 1
  end
end
local left = redis.call('zcard', KEYS[1])
if left == 0 then
  redis.call('del', KEYS[2])
  redis.call('hdel', KEYS[3], ARGV[1])
end
return {moved, left}
)lua";

}  // namespace

std::shared_ptr<const PausedSet> PauseState::current() const {
    std::lock_guard lock(mutex_);
    return current_;
}

bool PauseState::update(PausedSet next) {
    std::lock_guard lock(mutex_);
    if (next == *current_) return false;
    any_.store(!next.workers.empty() || !next.queues.empty(), std::memory_order_release);
    current_ = std::make_shared<const PausedSet>(std::move(next));
    return true;
}

std::string pause_control_worker_name(std::string_view job_class) {
    // ActiveSupport: "::" → "/", then "_" between an acronym and a capitalised word
    // ("HTTPServer" → "HTTP_Server") and between a lower-case letter or digit and a capital,
    // "-" → "_", all lower case.
    std::string s;
    for (size_t i = 0; i < job_class.size(); ++i) {
        if (job_class.compare(i, 2, "::") == 0) {
            s += '/';
            ++i;
        } else {
            s += job_class[i];
        }
    }
    auto upper = [](char c) { return std::isupper(static_cast<unsigned char>(c)) != 0; };
    auto lower_or_digit = [](char c) {
        return std::islower(static_cast<unsigned char>(c)) ||
               std::isdigit(static_cast<unsigned char>(c));
    };
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (i > 0 && upper(c)) {
            const char prev = s[i - 1];
            const bool next_lower =
                i + 1 < s.size() && std::islower(static_cast<unsigned char>(s[i + 1]));
            if (lower_or_digit(prev) || (upper(prev) && next_lower)) out += '_';
        }
        out += c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    return out;
}

ParkedJobs::ParkedJobs(const Keys& keys, Compat compat)
    : keys_(keys), compat_(compat), park_script_(kParkScript), resume_script_(kResumeScript) {}

void ParkedJobs::park(redis::Connection& conn, const std::string& job_class,
                      const std::string& payload, const std::string& descriptor,
                      const std::string* working_list) const {
    const std::string worker = pause_control_worker_name(job_class);
    std::vector<std::string> keys{keys_.parked_jobs(worker), keys_.parked_score(worker),
                                  keys_.parked_classes()};
    if (working_list) keys.push_back(*working_list);
    park_script_.run(conn, keys, {payload, job_class, descriptor});
}

ParkedJobs::Resumed ParkedJobs::resume_batch(redis::Connection& conn, const std::string& job_class,
                                             size_t batch) const {
    const std::string worker = pause_control_worker_name(job_class);
    const std::string zset = keys_.parked_jobs(worker);
    auto members = conn.command({"ZRANGE", zset, "0", std::to_string(batch - 1)});
    std::vector<std::string> args{job_class, keys_.prefix()};
    const std::string now = payload_timestamp(compat_, epoch_seconds());
    for (size_t i = 0; i < members.size(); ++i) {
        std::string member(members[i].str());
        std::string queue = "default";
        std::string payload = member;
        // Only parsed jobs are parked, but a member written by another tool may not be one:
        // it still goes back to "default" unchanged rather than staying parked for ever.
        if (auto obj = RawJsonObject::parse(member)) {
            if (auto* q = obj->find("queue")) {
                auto parsed = nlohmann::json::parse(*q, nullptr, false);
                if (parsed.is_string()) queue = parsed.get<std::string>();
            }
            obj->set("enqueued_at", now);
            payload = obj->dump();
        }
        args.push_back(std::move(member));
        args.push_back(std::move(queue));
        args.push_back(std::move(payload));
    }
    // Run even with no members: it removes the keys of a class whose ZSET is already empty.
    auto reply = resume_script_.run(
        conn, {zset, keys_.parked_score(worker), keys_.parked_classes(), keys_.queues()}, args);
    return {static_cast<size_t>(reply[0].integer()), reply[1].integer()};
}

void PauseControlMiddleware::call(JobContext& ctx, const Next& next) const {
    if (!state_.anything_paused()) return next();
    const auto paused = state_.current();
    const Job& job = ctx.job;
    if (paused->queues.count(job.queue)) {
        // Popped by a fetch that was already blocked on this queue when it was paused: back to
        // the front, untouched, where it was.
        if (ctx.working_list)  // back and out of the working list together (see park)
            ctx.redis.pipeline(
                redis::in_transaction_if_removed({"LREM", *ctx.working_list, "1", job.raw},
                                                 {{"RPUSH", keys_.queue(job.queue), job.raw}}));
        else
            ctx.redis.command({"RPUSH", keys_.queue(job.queue), job.raw});
        ctx.working_list = nullptr;  // it left the working list (JobContext::working_list)
        ctx.log.debug("class={} jid={} put back: queue {} is paused", job.display_class(), job.jid,
                      job.queue);
        return;
    }
    const std::string& job_class = job.handler_name();
    if (!paused->workers.count(job_class)) return next();
    const PauseStrategy* strategy = strategies_.find(job_class);
    parked_.park(ctx.redis, job_class, job.raw, strategy ? strategy->descriptor() : "manual",
                 ctx.working_list);
    ctx.working_list = nullptr;  // it left the working list (JobContext::working_list)
    increment(outcome_counters().parked);
    ctx.log.debug("class={} jid={} parked: the worker is paused", job.display_class(), job.jid);
}

}  // namespace kiqd
