#include "server/scheduler.hpp"

#include <algorithm>
#include <chrono>
#include <future>
#include <iterator>
#include <optional>

#include "common/outcome_counters.hpp"
#include "job/raw_json_object.hpp"
#include "kiqd/deadline.hpp"
#include "redis/lua_type_guard.hpp"
#include "server/connection_budget.hpp"

namespace kiqd {
namespace {

// Due members read per ZRANGEBYSCORE, and the most one batch script call moves. Sized so that a
// call holds Redis for one to two milliseconds with Sidekiq-sized payloads, well under the few
// milliseconds other clients can wait (docs/benchmarks.md#scheduler-backlog).
constexpr size_t kBatch = 400;
// Larger payloads cut a page into more calls: a call's LPUSHes copy what it carries.
constexpr size_t kBatchBytes = 512 * 1024;

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

// Moves due members from their sorted set onto their queues, many in one call, each only if
// this call removed it (ZREM-guarded as the single move above): two schedulers reading the same
// page never enqueue a member twice, and a member is never out of both the set and its queue.
// Each queue gets its members in one LPUSH, in the order given (by score), and one SADD queues.
// A queue whose key is not a list (or a `queues` key that is not a set) is refused: its members
// are not touched and stay due; the others move.
// The usual case is the page still being what the caller read: the set's members at ranks
// ARGV[1].. are exactly the ones given. Then one ZREMRANGEBYRANK removes them all, which is
// what a ZREM of each would have done. Otherwise (another process moved some, a bad member
// stayed in between, a queue is refused) each member is ZREMed, and moved only if that removed it.
// KEYS[1]     -> the source sorted set ("retry" or "schedule")
// KEYS[2]     -> the "queues" set
// KEYS[2 + i] -> the list of queue i ("queue:<name>"), i = 1..Q
// --
// ARGV[1]           -> the rank of the first member as read (the members left in place before it)
// ARGV[2]           -> Q, the number of queues
// ARGV[1 + 2i]      -> the name of queue i (added to KEYS[2])
// ARGV[2 + 2i]      -> C_i, how many members go to queue i (at least one)
// ARGV[3 + 2Q]...   -> the members as read from KEYS[1], queue 1's C_1 first, then queue 2's, ...
//                      each queue's in score order
// then, in the same order, the payload of each member: the member with a fresh enqueued_at.
// Returns {moved, refusal text, members it held, refusal text, members it held, ...}.
const char* const kMoveBatchToQueuesScript = KIQD_LUA_TYPE_GUARD R"lua(
local start = tonumber(ARGV[1])
local q = tonumber(ARGV[2])
local m0 = 3 + 2 * q
local n = (#ARGV - m0 + 1) / 2
local p0 = m0 + n
local all_refused = wrong_type({KEYS[2], 'set'})
local refusal = {}
local whole = true
for i = 1, q do
  refusal[i] = all_refused or wrong_type({KEYS[2 + i], 'list'})
  if refusal[i] then whole = false end
end
if whole then
  local at = redis.call('zrange', KEYS[1], start, start + n - 1)
  if #at == n then
    local page = {}
    for j = 1, n do page[at[j]] = true end
    for j = m0, p0 - 1 do
      if not page[ARGV[j]] then
        whole = false
        break
      end
    end
  else
    whole = false
  end
end
local reply = {0}
local moved = 0
local off = 0
if whole then
  redis.call('zremrangebyrank', KEYS[1], start, start + n - 1)
  moved = n
end
for i = 1, q do
  local c = tonumber(ARGV[2 + 2 * i])
  if whole then
    redis.call('sadd', KEYS[2], ARGV[1 + 2 * i])
    redis.call('lpush', KEYS[2 + i], unpack(ARGV, p0 + off, p0 + off + c - 1))
  elseif refusal[i] then
    reply[#reply + 1] = refusal[i].err
    reply[#reply + 1] = c
  else
    local list = {}
    for j = off, off + c - 1 do
      if redis.call('zrem', KEYS[1], ARGV[m0 + j]) == 1 then list[#list + 1] = ARGV[p0 + j] end
    end
    if #list > 0 then
      redis.call('sadd', KEYS[2], ARGV[1 + 2 * i])
      redis.call('lpush', KEYS[2 + i], unpack(list))
      moved = moved + #list
    end
  end
  off = off + c
end
reply[1] = moved
return reply
)lua";

namespace {

// One call of kMoveBatchToQueuesScript being built: its members and payloads by queue, the
// queues in the order of their first member.
struct BatchCall {
    struct Queue {
        std::string name;
        std::vector<std::string> members, payloads;
    };
    std::vector<Queue> queues;
    std::map<std::string, size_t, std::less<>> index;  // name -> its place in queues
    size_t count = 0;
    size_t bytes = 0;

    void add(std::string member, const std::string& queue, std::string payload) {
        auto it = index.find(queue);
        if (it == index.end()) {
            queues.push_back({queue, {}, {}});
            it = index.emplace(queue, queues.size() - 1).first;
        }
        bytes += member.size() + payload.size();
        ++count;
        queues[it->second].members.push_back(std::move(member));
        queues[it->second].payloads.push_back(std::move(payload));
    }

    redis::Command command(const redis::Script& script, const Keys& keys, const std::string& set,
                           size_t start) {
        std::vector<std::string> k{set, keys.queues()};
        std::vector<std::string> args{std::to_string(start), std::to_string(queues.size())};
        args.reserve(2 + 2 * queues.size() + 2 * count);
        for (const auto& q : queues) {
            k.push_back(keys.queue(q.name));
            args.push_back(q.name);
            args.push_back(std::to_string(q.members.size()));
        }
        for (auto& q : queues)
            for (auto& m : q.members) args.push_back(std::move(m));
        for (auto& q : queues)
            for (auto& p : q.payloads) args.push_back(std::move(p));
        return script.evalsha_command(std::move(k), std::move(args));
    }
};

}  // namespace

Scheduler::Scheduler(Runtime& rt)
    : rt_(rt),
      batch_script_(kMoveBatchToQueuesScript),
      kill_script_(kMoveToDeadScript),
      rng_(std::random_device{}()),
      worker_("scheduler", rt.log) {}

Scheduler::~Scheduler() {
    stop();
}

namespace {

// A page of due members made ready to send: the dead-set moves of its bad members (sent first:
// gone from the set, they leave the page's ranks to the others), then its batch calls.
struct Page {
    std::vector<redis::Command> commands;
    size_t kills = 0;
    std::vector<BatchCall> batches;
};

// Runs on the scheduler thread, or on the short-lived thread that prepares the next page while
// a page's round trip runs: it reads `due`, and of the runtime only what is safe from any thread
// (the logger, the outcome counters, the keys, the dead set's entry format).
Page prepare(Runtime& rt, const redis::Script& kill_script, const redis::ReplyRef& due,
             const std::string& set, const std::string& now_score, const std::string& enqueued_at) {
    Page page;
    std::vector<BatchCall> calls(1);
    for (size_t i = 0; i < due.size(); ++i) {
        std::string member(due[i].str());
        std::string error;
        auto obj = RawJsonObject::parse(member, &error);
        if (!obj) {
            increment(outcome_counters().unrunnable);
            increment(outcome_counters().dead);
            rt.log.error("{}: member is not a JSON object ({}); moved to the dead set", set, error);
            page.commands.push_back(kill_script.evalsha_command(
                {set, rt.keys.dead()},
                {member, now_score,
                 rt.dead.invalid_entry(member, "default", {"JSON::ParserError", error})}));
            continue;
        }
        std::string queue = "default";
        if (auto* q = obj->find("queue"); q && q->size() >= 2 && q->front() == '"') {
            if (q->find('\\') == std::string::npos)
                queue = q->substr(1, q->size() - 2);  // no escapes: the text between the quotes
            else if (auto parsed = nlohmann::json::parse(*q, nullptr, false); parsed.is_string())
                queue = parsed.get<std::string>();
        }
        obj->set("enqueued_at", enqueued_at);
        if (calls.back().count > 0 && calls.back().bytes >= kBatchBytes) calls.emplace_back();
        calls.back().add(std::move(member), queue, obj->dump());
    }
    page.kills = page.commands.size();
    for (auto& call : calls)
        if (call.count > 0) page.batches.push_back(std::move(call));
    return page;
}

}  // namespace

size_t Scheduler::enqueue_due(redis::Connection& conn, double now) {
    size_t moved = 0;
    const std::string now_score = score_text(now);
    // enqueued_at is the time of each page's preparation: a long backlog takes seconds to move.
    const auto started = std::chrono::steady_clock::now();
    auto enqueued_at = [&] {
        const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - started;
        return payload_timestamp(rt_.config.compat, now + elapsed.count());
    };
    std::map<std::string, size_t> refused;  // a move's WRONGTYPE error → due members it held up
    for (const auto& set : {rt_.keys.retry(), rt_.keys.schedule()}) {
        size_t left_in_place = 0;  // refused members of this set: the next page starts after them
        auto read = [&](size_t offset) {
            return redis::Command{
                "ZRANGEBYSCORE",       set, "-inf", now_score, "LIMIT", std::to_string(offset),
                std::to_string(kBatch)};
        };
        // `due` is the page being moved; `ahead` the one after it, read before `due` moved. While
        // a round trip moves `due` (and reads the page after `ahead`), a second thread prepares
        // `ahead`, so that Redis and this process work at the same time.
        std::optional<redis::Reply> due, ahead;
        std::optional<Page> page;
        for (;;) {
            if (!due) {
                auto first = conn.pipeline({read(left_in_place), read(left_in_place + kBatch)});
                due.emplace(std::move(first[0]));
                if (due->size() == kBatch) ahead.emplace(std::move(first[1]));
            }
            if (due->size() == 0) break;
            if (!scripts_loaded_) {
                batch_script_.load(conn);
                kill_script_.load(conn);
                scripts_loaded_ = true;
            }
            if (!page) page = prepare(rt_, kill_script_, *due, set, now_score, enqueued_at());
            std::vector<redis::Command> commands = std::move(page->commands);
            for (auto& batch : page->batches)
                commands.push_back(batch.command(batch_script_, rt_.keys, set, left_in_place));
            const size_t sent = commands.size();
            // Once `due` has moved, `ahead` holds the ranks it held, and the page after follows.
            const bool more = ahead && ahead->size() == kBatch;
            if (more) commands.push_back(read(left_in_place + kBatch));
            std::future<Page> next;
            if (ahead && ahead->size() > 0)
                next = std::async(std::launch::async, [&, at = enqueued_at()] {
                    return prepare(rt_, kill_script_, *ahead, set, now_score, at);
                });
            auto replies = conn.pipeline_unchecked(commands);
            auto noscript = [&] {
                return std::any_of(replies.begin(), replies.end(), [](const redis::Reply& r) {
                    return r.is_error() && r.error_text().substr(0, 8) == "NOSCRIPT";
                });
            };
            if (noscript()) {
                // A restarted Redis has an empty script cache, so no call ran (nor the read after
                // them, which the first moves precede). Every move is guarded by its ZREM:
                // sending them again cannot enqueue anything twice.
                batch_script_.load(conn);
                kill_script_.load(conn);
                replies = conn.pipeline_unchecked(commands);
                if (noscript()) throw redis::ReplyError("NOSCRIPT after SCRIPT LOAD");
            }
            const size_t held_before = left_in_place;
            for (size_t r = 0; r < sent; ++r) {
                const auto& reply = replies[r];
                if (reply.is_error()) {
                    // The dead set's key of the wrong type: the script wrote nothing.
                    if (reply.error_text().substr(0, 9) != "WRONGTYPE")
                        throw redis::ReplyError(std::string(reply.error_text()));
                    ++refused[std::string(reply.error_text())];
                    ++left_in_place;
                } else if (r < page->kills) {
                    moved += reply.integer() == 1 ? 1 : 0;
                } else {
                    // {moved, refusal, held, ...}: held members stay where they are.
                    const size_t parts = reply.size();
                    if (parts == 0 || parts % 2 == 0) reply.unexpected("batch move reply");
                    moved += static_cast<size_t>(reply[0].integer());
                    for (size_t k = 1; k + 1 < parts; k += 2) {
                        const auto held = static_cast<size_t>(reply[k + 1].integer());
                        refused[std::string(reply[k].str())] += held;
                        left_in_place += held;
                    }
                }
            }
            if (rt_.lifecycle.is_quiet()) break;
            if (!ahead) {
                // Nothing was read ahead: a short page was the last; after a full one, read on.
                if (due->size() < kBatch) break;
                due.reset();
                page.reset();
                continue;
            }
            if (ahead->size() == 0) break;
            Page prepared = next.get();  // before `ahead` changes: the thread reads it
            due = std::move(ahead);
            page.emplace(std::move(prepared));
            ahead.reset();
            // Members left in place shift the ranks that read used: after moving the prepared
            // page, read again from after them.
            if (more && left_in_place == held_before && replies.back().is_array())
                ahead.emplace(std::move(replies.back()));
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
