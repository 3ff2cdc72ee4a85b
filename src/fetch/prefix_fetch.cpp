#include "fetch/prefix_fetch.hpp"

#include <algorithm>
#include <string_view>

#include "kiqd/config.hpp"
#include "redis/lua_type_guard.hpp"

namespace kiqd {
namespace {

// Takes up to ARGV[1] jobs, each from the first queue of its own short order that has one. It
// pops them (RPOP), or, when the working lists are given, moves each into its queue's working
// list (RPOPLPUSH).
//
// KEYS[1..m]    the queue lists this call may take from (m = ARGV[2])
// KEYS[m+1..2m] optional (reliable fetch): their working lists; KEYS[m+q] receives KEYS[q]'s
//               jobs. The script moves rather than pops whenever it has more than m KEYS.
// KEYS[2m+1]    with the working lists: the suspects set (orphan_recovery.hpp); a moved job
//               found there leaves it and is flagged. One TYPE per call.
// ARGV[1]       how many jobs to take at most
// ARGV[2]       m
// ARGV[3]       w, the length of each order
// ARGV[4]       one or more orders of w entries, each entry a 1-based index into KEYS[1..m]
//               (0 = padding, skipped) in two bytes, high byte first; job j (from 0) uses order
//               floor(j / r) mod <number of orders>. One packed string rather than an argument
//               per entry: a batch of 50 sends up to 150 entries (50 orders of 3), and Redis
//               spends more on each argument it receives than on reading two bytes of one.
// ARGV[5]       r, how many consecutive jobs use one order (a run)
//
// Returns {{e, ...}, q, payload, q, payload, ...}: first the indexes of the queues it found
// empty, then for each job taken the index of its queue (negated for a suspect) and the job.
// A job whose whole order is empty is skipped: the call returns fewer jobs, and the caller
// draws again over the queues still believed non-empty. A WRONGTYPE error, and nothing taken,
// when a queue or working list holds something other than a list, or the suspects key
// something other than a set: the pops run under redis.pcall, and a refused one puts back the
// jobs taken before it (Redis keeps a failed script's writes, and an error reply could not
// deliver them), so that only the keys actually used are checked, not every queue's.
const char* const kPrefixFetchScript = KIQD_LUA_TYPE_GUARD R"lua(
local m = tonumber(ARGV[2])
local width = tonumber(ARGV[3])
local move = #KEYS > m
local suspects = nil
if move then
  suspects = KEYS[2 * m + 1]
  local t = redis.call('type', suspects).ok
  if t == 'none' then suspects = nil elseif t ~= 'set' then return wrong_type({suspects, 'set'}) end
end
local want = tonumber(ARGV[1])
local packed = ARGV[4]
local orders = #packed / (2 * width)
local run = tonumber(ARGV[5])
local empty, known_empty, taken = {}, {}, {}
local out = {empty}
local function refuse(q, err)
  for i = #taken, 1, -1 do
    local t = taken[i]
    if move then
      redis.call('rpush', KEYS[t[1]], redis.call('lpop', KEYS[m + t[1]]))
    else
      redis.call('rpush', KEYS[t[1]], t[2])
    end
    if t[3] then redis.call('sadd', suspects, t[2]) end
  end
  local checks = {KEYS[q], 'list'}
  if move then checks[3] = KEYS[m + q]; checks[4] = 'list' end
  return wrong_type(checks) or redis.error_reply(err)
end
for j = 0, want - 1 do
  local base = (math.floor(j / run) % orders) * width * 2 - 1
  for k = 1, width do
    local hi, lo = string.byte(packed, base + 2 * k, base + 2 * k + 1)
    local q = hi * 256 + lo
    if q > 0 and not known_empty[q] then
      local job
      if move then job = redis.pcall('rpoplpush', KEYS[q], KEYS[m + q])
      else job = redis.pcall('rpop', KEYS[q]) end
      if type(job) == 'table' then return refuse(q, job.err) end
      if job then
        local flagged = suspects ~= nil and redis.call('srem', suspects, job) == 1
        taken[#taken + 1] = {q, job, flagged}
        out[#out + 1] = flagged and -q or q
        out[#out + 1] = job
        break
      end
      known_empty[q] = true
      empty[#empty + 1] = q
    end
  end
end
return out
)lua";

// The sweep: which of KEYS (queue lists) have a job. One call instead of one LLEN each, so a
// sweep of 500 queues costs Redis one command to parse and kiqd one reply to read.
//
// Returns the 1-based indexes of the KEYS whose LLEN is not 0, and of those whose LLEN fails (a
// key of another type: the fetch then meets it and reports WRONGTYPE, instead of the queue
// being skipped silently).
const char* const kSweepScript = R"lua(
local out = {}
for i = 1, #KEYS do
  local n = redis.pcall('llen', KEYS[i])
  if type(n) ~= 'number' or n > 0 then out[#out + 1] = i end
end
return out
)lua";

long long steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

}  // namespace

PrefixFetch::PrefixFetch(const QueueOrder& order, std::vector<std::string> queue_keys,
                         std::vector<std::string> working_keys, std::string suspects)
    : order_(order),
      queue_keys_(std::move(queue_keys)),
      working_keys_(std::move(working_keys)),
      suspects_(std::move(suspects)),
      script_(kPrefixFetchScript),
      sweep_script_(kSweepScript),
      empty_(std::make_unique<std::atomic<bool>[]>(order.names().size())) {}

void PrefixFetch::candidates(std::vector<size_t>& out) const {
    out.clear();
    for (size_t i = 0; i < queue_keys_.size(); ++i)
        if (!order_.paused(i) && !known_empty(i)) out.push_back(i);
}

void PrefixFetch::candidate_sums(const std::vector<size_t>& candidates,
                                 std::vector<long long>& sums) const {
    sums.clear();
    long long total = 0;
    for (size_t i : candidates) sums.push_back(total += order_.weight(i));
}

void PrefixFetch::draw(std::mt19937_64& rng, const std::vector<size_t>& candidates,
                       const std::vector<long long>& sums, size_t width,
                       std::vector<size_t>& out) const {
    out.clear();
    width = std::min(width, candidates.size());
    if (order_.strict()) {
        out.assign(candidates.begin(), candidates.begin() + static_cast<long>(width));
        return;
    }
    // Weighted draws without replacement: a draw that repeats an earlier one is drawn again,
    // which leaves each remaining queue's chance proportional to its weight. After many
    // repeats (a few heavy queues already drawn), an exact walk over the remaining weight.
    const long long total = sums.empty() ? 0 : sums.back();
    const auto weight_at = [&](size_t p) { return sums[p] - (p ? sums[p - 1] : 0); };
    thread_local std::vector<size_t> positions;
    positions.clear();
    while (positions.size() < width) {
        size_t pos = candidates.size();
        for (int attempt = 0; attempt < 32 && pos == candidates.size(); ++attempt) {
            const long long r = std::uniform_int_distribution<long long>(0, total - 1)(rng);
            const auto p =
                static_cast<size_t>(std::upper_bound(sums.begin(), sums.end(), r) - sums.begin());
            if (std::find(positions.begin(), positions.end(), p) == positions.end()) pos = p;
        }
        if (pos == candidates.size()) {
            long long left = total;
            for (size_t p : positions) left -= weight_at(p);
            long long r = std::uniform_int_distribution<long long>(0, left - 1)(rng);
            for (size_t p = 0; p < candidates.size(); ++p) {
                if (std::find(positions.begin(), positions.end(), p) != positions.end()) continue;
                r -= weight_at(p);
                if (r < 0) {
                    pos = p;
                    break;
                }
            }
        }
        positions.push_back(pos);
    }
    for (size_t p : positions) out.push_back(candidates[p]);
}

void PrefixFetch::sweep(redis::Connection& conn) const {
    thread_local std::vector<std::string_view> keys;
    thread_local std::vector<size_t> indexes;
    keys.clear();
    indexes.clear();
    for (size_t i = 0; i < queue_keys_.size(); ++i) {
        if (order_.paused(i)) continue;
        keys.push_back(queue_keys_[i]);
        indexes.push_back(i);
    }
    last_sweep_.store(steady_ns(), std::memory_order_relaxed);
    if (keys.empty()) return;
    const auto reply = sweep_script_.run_views(conn, keys, {});
    if (!reply.is_array()) reply.unexpected("sweep script: unexpected reply");
    thread_local std::vector<bool> has_job;
    has_job.assign(indexes.size(), false);
    for (size_t k = 0; k < reply.size(); ++k) {
        const long long at = reply[k].integer();
        if (at < 1 || static_cast<size_t>(at) > indexes.size())
            reply.unexpected("sweep script: index out of range");
        has_job[static_cast<size_t>(at) - 1] = true;
    }
    for (size_t k = 0; k < indexes.size(); ++k)
        empty_[indexes[k]].store(!has_job[k], std::memory_order_relaxed);
}

bool PrefixFetch::maybe_sweep(redis::Connection& conn) const {
    const long long last = last_sweep_.load(std::memory_order_relaxed);
    if (last != 0 && steady_ns() - last < std::chrono::nanoseconds(kSweepPeriod).count())
        return false;
    bool expected = false;
    if (!sweeping_.compare_exchange_strong(expected, true)) return false;  // another thread does
    try {
        sweep(conn);
    } catch (...) {
        sweeping_.store(false);
        throw;
    }
    sweeping_.store(false);
    return true;
}

void PrefixFetch::woke_with_job(size_t index) const {
    empty_[index].store(false, std::memory_order_relaxed);
}

bool PrefixFetch::prepare(std::mt19937_64& rng, size_t count, std::vector<std::string>& keys,
                          std::vector<std::string>& args, std::vector<size_t>& sent) const {
    thread_local std::vector<size_t> cands, drawn, local;
    thread_local std::vector<long long> sums;
    candidates(cands);
    if (cands.empty()) return false;
    candidate_sums(cands, sums);
    // Which KEYS slot (1-based) each queue got in this call; 0 = not sent yet.
    local.assign(queue_keys_.size(), 0);
    sent.clear();
    keys.clear();
    args.clear();
    // Each order is a short prefix of Sidekiq's order, for a fallback within the call when its
    // first queue has turned out empty. Among many queues, the first one drawn is almost always
    // one with jobs (the empty ones are known and left out), while the prefix would triple the
    // keys sent: a batch of 50 names up to 150 queues and their 150 working lists, and Redis
    // spends more on each key it receives than on a job. So a weighted order over many queues
    // is its first queue only; a job whose queue has turned out empty is skipped, and the next
    // refill draws without it.
    // And each such order serves a run of kRun jobs: a refill then names 10 queues, not 50,
    // and each working list gets a few jobs at once instead of being created and deleted
    // around every single job. A queue's share of fetches stays proportional to its weight
    // (each order is still drawn by weight, and yields kRun jobs from any queue that has them),
    // but varies more over a short stretch; among a few queues, where the keys are few anyway,
    // every job keeps its own draw, as in Sidekiq.
    const bool weighted = !order_.strict() && cands.size() > 1;
    const bool many = weighted && cands.size() > kFewQueues;
    const size_t width = std::min(many ? size_t{1} : kWidth, cands.size());
    const size_t run = many ? kRun : 1;
    const size_t orders = weighted ? (count + run - 1) / run : 1;
    args.push_back(std::to_string(count));
    args.push_back("");  // m, known once every order is drawn
    args.push_back(std::to_string(width));
    static_assert(ReliableFetchConfig::kMaxBatchSize * kWidth <= 0xffff, "an entry is 2 bytes");
    args.emplace_back();  // the orders, two bytes an entry
    std::string& packed = args.back();
    for (size_t j = 0; j < orders; ++j) {
        draw(rng, cands, sums, width, drawn);
        for (size_t q : drawn) {
            if (!local[q]) {
                sent.push_back(q);
                local[q] = sent.size();
            }
            packed.push_back(static_cast<char>(local[q] >> 8));
            packed.push_back(static_cast<char>(local[q] & 0xff));
        }
    }
    args.push_back(std::to_string(run));
    args[1] = std::to_string(sent.size());
    for (size_t q : sent) keys.push_back(queue_keys_[q]);
    if (!working_keys_.empty()) {
        for (size_t q : sent) keys.push_back(working_keys_[q]);
        keys.push_back(suspects_);
    }
    return true;
}

std::vector<UnitOfWork> PrefixFetch::units(const redis::Reply& reply,
                                           const std::vector<size_t>& sent) const {
    if (!reply.is_array() || reply.size() < 1 || reply.size() % 2 != 1)
        reply.unexpected("prefix fetch script: unexpected reply");
    auto in_range = [&](long long q) {
        if (q < 1 || static_cast<size_t>(q) > sent.size())
            reply.unexpected("prefix fetch script: index out of range");
        return sent[static_cast<size_t>(q) - 1];
    };
    const auto empties = reply[0];
    for (size_t i = 0; i < empties.size(); ++i) mark_empty(in_range(empties[i].integer()));
    std::vector<UnitOfWork> out;
    out.reserve(reply.size() / 2);
    for (size_t i = 1; i < reply.size(); i += 2) {
        const long long index = reply[i].integer();
        const size_t q = in_range(index < 0 ? -index : index);
        out.push_back(UnitOfWork{order_.names()[q], std::string(reply[i + 1].str()), index < 0});
    }
    return out;
}

std::vector<UnitOfWork> PrefixFetch::take(redis::Connection& conn, std::mt19937_64& rng,
                                          size_t count, std::vector<redis::Command>& before) const {
    bool swept = maybe_sweep(conn);
    thread_local std::vector<std::string> keys, args;
    thread_local std::vector<size_t> sent;
    // Each round that takes nothing marks at least one queue empty, so this ends.
    for (;;) {
        if (!prepare(rng, count, keys, args, sent)) {
            if (swept || !sweep_before_block()) return {};
            sweep(conn);  // every queue looks empty: look again before the caller blocks
            swept = true;
            continue;
        }
        auto reply = script_.run_after(conn, &before, keys, args);
        auto taken = units(reply, sent);
        if (!taken.empty()) return taken;
    }
}

std::optional<UnitOfWork> PrefixFetch::pop_one(redis::Connection& conn, std::mt19937_64& rng,
                                               std::vector<redis::Command>& before) const {
    bool swept = maybe_sweep(conn);
    thread_local std::vector<size_t> cands, drawn;
    thread_local std::vector<long long> sums;
    for (;;) {
        candidates(cands);
        if (cands.empty()) {
            if (swept || !sweep_before_block()) return std::nullopt;
            sweep(conn);
            swept = true;
            continue;
        }
        candidate_sums(cands, sums);
        draw(rng, cands, sums, 1, drawn);
        const size_t q = drawn.front();
        auto job = command_after(conn, before, {"RPOP", queue_keys_[q]});
        if (!job.is_nil()) return UnitOfWork{order_.names()[q], std::string(job.str())};
        mark_empty(q);  // the next draw is over the others: the same shares as a longer order
    }
}

}  // namespace kiqd
