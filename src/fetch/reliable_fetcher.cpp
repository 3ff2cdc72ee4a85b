#include "fetch/reliable_fetcher.hpp"

#include <algorithm>

#include "fetch/fair_fetch.hpp"
#include "fetch/fetch_buffer.hpp"
#include "fetch/fetch_combiner.hpp"
#include "fetch/prefix_fetch.hpp"
#include "fetch/refill_acquirer.hpp"

namespace kiqd {
namespace {

// Up to this many queues, working_list scans their names; above, it looks them up.
constexpr size_t kScannedQueues = 8;

// One unbatched reliable fetch over the queues after the first of this fetch's order (the
// first was tried with a plain RPOPLPUSH): moves the job at the popping end of the first
// non-empty queue into its working list (RPOPLPUSH).
//
// KEYS[1..n]    the queue lists, in this fetch's order
// KEYS[n+1..2n] their working lists: KEYS[n+i] receives KEYS[i]'s job
// ARGV          none
//
// Returns {i, payload}: the 1-based index of the queue in KEYS[1..n] and the moved job; nil when
// every queue is empty (nothing moved).
constexpr const char* kFetchScript = R"lua(
local n = #KEYS / 2
for i = 1, n do
  local job = redis.call('rpoplpush', KEYS[i], KEYS[n + i])
  if job then return {i, job} end
end
return nil
)lua";

}  // namespace

ReliableFetcher::ReliableFetcher(const Keys& keys, const QueueOrder& order, std::string identity,
                                 size_t batch_size, size_t max_refills, size_t threads)
    : ReliableFetcher(keys, order, std::move(identity), batch_size, max_refills, nullptr, threads) {
}

ReliableFetcher::ReliableFetcher(const Keys& keys, const QueueOrder& order, std::string identity,
                                 size_t batch_size, size_t max_refills,
                                 std::unique_ptr<FairFetch> fair, size_t threads)
    : keys_(keys),
      order_(order),
      identity_(std::move(identity)),
      fetch_script_(kFetchScript),
      batch_(std::max<size_t>(batch_size, 1)),
      batch_script_(FairFetch::script_source()),  // used with fair queues only
      fair_(std::move(fair)) {
    for (const auto& name : order_.names()) {
        queue_keys_.push_back(keys_.queue(name));
        working_.emplace_back(name, keys_.working(identity_, name));
    }
    if (working_.size() > kScannedQueues)
        for (size_t i = 0; i < working_.size(); ++i) working_index_.emplace(working_[i].first, i);
    batch_keys_ = queue_keys_;
    for (const auto& w : working_) batch_keys_.push_back(w.second);
    fair_keys_ = batch_keys_;
    batch_keys_.push_back(suspects_key());
    if (batch_ > 1) buffer_ = std::make_unique<FetchBuffer>(batch_, max_refills, threads);
    if (buffer_)
        for (size_t i = 0; i < threads; ++i) deferred_.push_back(std::make_unique<Deferred>());
    if (buffer_ && !fair_) {
        std::vector<std::string> working_keys;
        for (const auto& w : working_) working_keys.push_back(w.second);
        prefix_ = std::make_unique<PrefixFetch>(order_, queue_keys_, std::move(working_keys),
                                                suspects_key());
    }
    if (batch_ == 1 && fair_) combiner_ = std::make_unique<FetchCombiner>(threads);
}

void ReliableFetcher::set_acquirer(const RefillAcquirer* acquirer, bool always) {
    if (buffer_) acquirer_ = acquirer;
    acquire_always_ = always;
}

std::vector<redis::Command> ReliableFetcher::take_deferred() const {
    std::vector<redis::Command> out;
    for (const auto& d : deferred_) {
        std::lock_guard lock(d->mutex);
        for (auto& c : d->commands) out.push_back(std::move(c));
        d->commands.clear();
    }
    return out;
}

void ReliableFetcher::restore_deferred(std::vector<redis::Command> commands) const {
    if (commands.empty() || deferred_.empty()) return;
    std::lock_guard lock(deferred_[0]->mutex);
    for (auto& c : commands) deferred_[0]->commands.push_back(std::move(c));
}

bool ReliableFetcher::defer_commands(std::vector<redis::Command>& commands, size_t slot) const {
    if (slot >= deferred_.size() || !buffer_->short_jobs(slot)) return false;
    std::lock_guard lock(deferred_[slot]->mutex);
    for (auto& c : commands) deferred_[slot]->commands.push_back(std::move(c));
    commands.clear();
    return true;
}

void ReliableFetcher::release_acquired(const UnitOfWork& unit,
                                       std::vector<redis::Command>& out) const {
    if (acquirer_ && unit.acquired) acquirer_->release_unclaimed(*unit.acquired, out);
}

ReliableFetcher::~ReliableFetcher() = default;

size_t ReliableFetcher::idle_queue(size_t slot, unsigned round) const {
    // A different queue per idle thread and round, skipping paused ones.
    size_t index = (slot + round) % queue_keys_.size();
    for (size_t k = 0; k < queue_keys_.size() && order_.paused(index); ++k)
        index = (index + 1) % queue_keys_.size();
    return index;
}

redis::Command ReliableFetcher::ack_command(const UnitOfWork& unit) const {
    // From the tail: the oldest entries are the ones that finished (new fetches go to the head).
    const std::string* list = working_list(unit.queue);
    return {"LREM", list ? *list : keys_.working(identity_, unit.queue), "-1", unit.payload};
}

std::vector<UnitOfWork> ReliableFetcher::move_batch(redis::Connection& conn, std::mt19937_64& rng,
                                                    std::vector<redis::Command>& pending,
                                                    const std::vector<UnitOfWork>& acks,
                                                    bool acquire_ahead) const {
    // Sent before the fetch below, so a job it fetches is no older than this (ownership_fence).
    const auto fetched_at = OwnershipFence::Clock::now();
    // Deferred acknowledgements and lock releases (this thread's, and those any thread deferred
    // to the next refill) go out in the same write as the fetch.
    auto deferred = take_deferred();
    if (acquirer_) acquirer_->fold_releases(conn, deferred);  // one script call, not one each
    std::vector<redis::Command> cmds;
    cmds.reserve(acks.size() + deferred.size() + pending.size() + 1);
    for (const auto& a : acks) cmds.push_back(ack_command(a));
    for (const auto& d : deferred) cmds.push_back(d);
    for (const auto& p : pending) cmds.push_back(p);
    std::vector<UnitOfWork> units;
    if (prefix_) {
        try {
            units = prefix_->take(conn, rng, batch_, cmds);
            if (!cmds.empty()) {
                // No queue had a job, so no script call carried them: they go out now, as the
                // caller blocks next.
                auto replies = conn.pipeline_unchecked(cmds);
                redis::resend_noscript(conn, cmds, replies, 0, cmds.size());
            }
        } catch (...) {
            restore_deferred(std::move(deferred));  // idempotent: they go again with a later write
            throw;
        }
        pending.clear();
    } else {
        units = move_batch_all_queues(conn, rng, pending, cmds, std::move(deferred));
    }
    for (auto& u : units) u.fetched_at = fetched_at;
    if (acquirer_ && acquire_ahead && !units.empty()) {
        try {
            acquirer_->acquire(conn, units);
        } catch (const redis::Error&) {
            // The jobs are in the working list already: they must reach the buffer. Without
            // what they would have acquired, their middlewares acquire one by one, as without
            // batching; anything the lost reply took expires by its TTL (never extended).
            for (auto& u : units) u.acquired.reset();
        }
    }
    return units;
}

std::vector<UnitOfWork> ReliableFetcher::move_batch_all_queues(
    redis::Connection& conn, std::mt19937_64& rng, std::vector<redis::Command>& pending,
    std::vector<redis::Command>& cmds, std::vector<redis::Command> deferred) const {
    thread_local std::vector<std::string> args;
    batch_order_args(order_, rng, batch_, args);
    if (fair_) fair_->fair_args(args);
    cmds.push_back(batch_script_.evalsha_command(batch_keys_, args));
    std::vector<redis::Reply> replies;
    try {
        replies = conn.pipeline_unchecked(cmds);
    } catch (...) {
        restore_deferred(std::move(deferred));  // idempotent: they go again with a later write
        throw;
    }
    redis::resend_noscript(conn, cmds, replies, 0, cmds.size() - 1);
    pending.clear();
    redis::Reply reply = std::move(replies.back());
    if (reply.is_error()) {
        if (reply.error_text().substr(0, 8) != "NOSCRIPT")
            throw redis::ReplyError(std::string(reply.error_text()));
        reply = batch_script_.run(conn, batch_keys_, args);  // the acknowledgements went out
    }
    return batch_units(reply, order_.names());
}

std::optional<UnitOfWork> ReliableFetcher::retrieve_work(
    redis::Connection& conn, std::mt19937_64& rng, size_t slot,
    std::vector<redis::Command>& pending) const {
    // Sent before any fetch this call makes, so a job fetched now is no older than this.
    const auto fetched_at = OwnershipFence::Clock::now();
    auto unit = take(conn, rng, slot, pending);
    if (!unit) return unit;
    if (unit->fetched_at == OwnershipFence::Clock::time_point{}) unit->fetched_at = fetched_at;
    if (!still_owned(conn, *unit, pending)) return std::nullopt;
    return unit;
}

bool ReliableFetcher::still_owned(redis::Connection& conn, UnitOfWork& unit,
                                  std::vector<redis::Command>& pending) const {
    if (fence_.holds(unit.fetched_at)) return true;
    bool owned = false;
    try {
        owned = fence_.prove(conn, pending, keys_.alive(identity_), keys_.working_lists(),
                             keys_.working(identity_, unit.queue), recoveries_key(identity_),
                             unit.payload, unit.fetched_at);
    } catch (const redis::Error&) {
        // Not known either way: a buffered job waits for the next try at the front of the
        // buffer; one fetched just now stays in the working list, where the stranded-job check
        // (orphan_recovery.hpp) finds it and puts it back in its queue.
        if (buffer_) buffer_->put_back(std::move(unit));
        throw;
    }
    if (owned) return true;
    // Recovered by another process while this one was away: that copy owns the job now.
    fence_.count_dropped();
    release_acquired(unit, pending);
    return false;
}

std::optional<UnitOfWork> ReliableFetcher::take(redis::Connection& conn, std::mt19937_64& rng,
                                                size_t slot,
                                                std::vector<redis::Command>& pending) const {
    if (!ready_.stop_requested()) {
        ready_.wait_for(std::chrono::seconds(kBlockSeconds));
        return std::nullopt;
    }
    if (order_.all_paused()) return wait_all_paused(conn, pending, kBlockSeconds);
    thread_local unsigned idle_rounds = 0;
    if (buffer_) {
        bool drained = false;
        auto unit = buffer_->take_or_refill(
            [&](std::vector<UnitOfWork>& acks) {
                // Locks and slots are taken ahead only while this thread's jobs are short
                // (fetch_buffer.hpp's kAcquireAheadJob): the refill's jobs then leave the
                // buffer within about a refill's worth of short jobs, so none holds a slot or
                // lock long without running. Long jobs: each middleware acquires for its own
                // job, as without batching.
                return move_batch(conn, rng, pending, acks,
                                  acquire_always_ || buffer_->acquires_ahead(slot));
            },
            std::chrono::seconds(kBlockSeconds), drained, slot);
        if (unit) {
            // Lock releases of the previous job stay in `pending`: they go out with this job's
            // first round trip (a middleware's acquire), or just before its handler runs
            // (processor.cpp), so that they cost no round trip of their own.
            return unit;
        }
        if (!drained) return std::nullopt;
        // Every queue was empty (and the acknowledgements went out): block on one queue.
        const size_t index = idle_queue(slot, idle_rounds++);
        auto blocked = command_after(conn, pending,
                                     {"BRPOPLPUSH", queue_keys_[index], working_[index].second,
                                      std::to_string(kBlockSeconds)});
        if (blocked.is_nil()) return std::nullopt;
        buffer_->note_taken(slot);
        if (prefix_) prefix_->woke_with_job(index);
        UnitOfWork taken{working_[index].first, std::string(blocked.str())};
        // What the batch script checks for each job it moves; one more round trip, when idle.
        taken.suspect = conn.command({"SREM", suspects_key(), taken.payload}).integer() == 1;
        return taken;
    }
    if (fair_) {
        // One script call for every thread waiting at this moment (fetch_combiner.hpp); each
        // job is in the working list before any thread sees it, as with one call per job.
        auto unit = combiner_->take(
            [&](size_t count) { return fair_->take(conn, rng, pending, fair_keys_, count); });
        if (unit) return unit;
        const size_t index = idle_queue(slot, idle_rounds++);
        // A thread the combined call left without a job still holds its previous job's
        // releases: they go out with the block, not 2 s later.
        auto blocked = command_after(conn, pending,
                                     {"BRPOPLPUSH", queue_keys_[index], working_[index].second,
                                      std::to_string(kBlockSeconds)});
        if (blocked.is_nil()) return std::nullopt;
        return UnitOfWork{working_[index].first, std::string(blocked.str())};
    }
    thread_local std::vector<const std::string*> names;
    thread_local std::vector<std::string> keys;
    order_.order(rng, names);
    if (names.empty()) return wait_all_paused(conn, pending, kBlockSeconds);
    const std::string* first = order_.names().data();
    auto index_of = [&](size_t i) { return static_cast<size_t>(names[i] - first); };
    // Under load the first queue of the order usually has a job, and a plain RPOPLPUSH costs
    // Redis less than a script call (drain of 100,000 no-ops at c=10: 19.4k → 20.9k jobs/s).
    // The script then tries the rest of the order, so the weighted shares are unchanged.
    const size_t head = index_of(0);
    auto popped =
        command_after(conn, pending, {"RPOPLPUSH", queue_keys_[head], working_[head].second});
    if (!popped.is_nil()) return UnitOfWork{working_[head].first, std::string(popped.str())};
    if (names.size() > 1) {
        const size_t rest = names.size() - 1;
        keys.resize(2 * rest);
        for (size_t i = 0; i < rest; ++i) {
            keys[i] = queue_keys_[index_of(i + 1)];
            keys[rest + i] = working_[index_of(i + 1)].second;
        }
        auto reply = fetch_script_.run(conn, keys, {});
        if (!reply.is_nil()) {
            if (reply.size() != 2) reply.unexpected("fetch script: unexpected reply");
            const auto i = static_cast<size_t>(reply[0].integer());  // 1-based over the rest
            if (i < 1 || i > rest) reply.unexpected("fetch script: index out of range");
            return UnitOfWork{*names[i], std::string(reply[1].str())};
        }
    }
    // Everything was empty: wait on one queue, a different one per idle thread and round.
    const size_t index = idle_queue(slot, idle_rounds++);
    auto blocked = conn.command(
        {"BRPOPLPUSH", queue_keys_[index], working_[index].second, std::to_string(kBlockSeconds)});
    if (blocked.is_nil()) return std::nullopt;
    return UnitOfWork{working_[index].first, std::string(blocked.str())};
}

std::vector<redis::Command> ReliableFetcher::mark_started_commands(const UnitOfWork& unit) const {
    if (!unit.suspect) return {};
    return {{"SADD", started_key(identity_), unit.payload}};
}

std::vector<redis::Command> ReliableFetcher::unmark_started_commands(const UnitOfWork& unit) const {
    if (!unit.suspect) return {};
    return {{"SREM", started_key(identity_), unit.payload}};
}

std::vector<redis::Command> ReliableFetcher::with_acknowledgement(
    const UnitOfWork& unit, std::vector<redis::Command> outcome) const {
    for (auto& c : unmark_started_commands(unit)) outcome.push_back(std::move(c));
    // The outcome (bare commands) and the acknowledgement land together or not at all, and only
    // while the job is still in this process's working list: recovered by another process
    // meanwhile, it is that process's now, and a retry entry written here would be a copy.
    if (outcome.empty()) return {ack_command(unit)};
    return redis::in_transaction_if_removed(ack_command(unit), std::move(outcome));
}

bool ReliableFetcher::defer_acknowledgement(const UnitOfWork& unit, size_t slot) const {
    // A suspect's start mark goes with its acknowledgement, at once.
    if (!buffer_ || unit.suspect) return false;
    return buffer_->defer_ack(unit, slot);
}

std::optional<std::chrono::steady_clock::time_point> ReliableFetcher::oldest_deferred_ack() const {
    if (!buffer_) return std::nullopt;
    return buffer_->oldest_ack();
}

bool ReliableFetcher::ack_watcher_idle() const {
    return !buffer_ || buffer_->ack_watcher_idle();
}

void ReliableFetcher::set_ack_watcher(std::function<void()> wake) const {
    if (buffer_) buffer_->set_ack_watcher(std::move(wake));
}

size_t ReliableFetcher::flush_acknowledgements(redis::Connection& conn) const {
    if (!buffer_) return 0;
    auto acks = buffer_->take_acks();
    if (acks.empty()) return 0;
    std::vector<redis::Command> commands;
    commands.reserve(acks.size());
    for (const auto& a : acks) commands.push_back(ack_command(a));
    std::vector<redis::Reply> replies;
    try {
        replies = conn.pipeline_unchecked(commands);
    } catch (...) {
        buffer_->restore_acks(std::move(acks));  // LREM is idempotent: they go again later
        throw;
    }
    for (const auto& r : replies)
        if (r.is_error()) {
            const std::string text(r.error_text());
            buffer_->restore_acks(std::move(acks));
            throw redis::ReplyError(text);
        }
    return acks.size();
}

std::vector<UnitOfWork> ReliableFetcher::take_buffered() const {
    return buffer_ ? buffer_->take_buffered() : std::vector<UnitOfWork>{};
}

std::vector<std::string> ReliableFetcher::held_payloads() const {
    return buffer_ ? buffer_->held_payloads() : std::vector<std::string>{};
}

std::vector<redis::Command> ReliableFetcher::release_commands() const {
    if (!buffer_) return {};
    std::vector<redis::Command> out = take_deferred();
    for (const auto& a : buffer_->take_acks()) out.push_back(ack_command(a));
    // RPUSHed last-fetched first, so the first fetched is at the very front again.
    auto buffered = buffer_->take_buffered();
    std::reverse(buffered.begin(), buffered.end());
    auto requeue = requeue_commands(buffered);
    for (auto& c : requeue) out.push_back(std::move(c));
    return out;
}

const std::string* ReliableFetcher::working_list(const std::string& queue) const {
    if (!working_index_.empty()) {
        const auto it = working_index_.find(queue);
        return it == working_index_.end() ? nullptr : &working_[it->second].second;
    }
    for (const auto& [name, list] : working_)  // a handful of queues: a scan beats a map
        if (name == queue) return &list;
    return nullptr;
}

std::vector<redis::Command> ReliableFetcher::requeue_commands(
    const std::vector<UnitOfWork>& units) const {
    if (units.empty()) return {};
    // Each job goes back only if it is still in this process's working list (recovered by
    // another process meanwhile, it is in a queue already, or running there).
    std::vector<redis::Command> out;
    for (const auto& u : units) {
        std::vector<redis::Command> back{{"RPUSH", keys_.queue(u.queue), u.payload}};
        if (u.suspect) {
            // Still a suspect when it is fetched again.
            back.push_back({"SREM", started_key(identity_), u.payload});
            back.push_back({"SADD", suspects_key(), u.payload});
            back.push_back({"EXPIRE", suspects_key(), std::to_string(kSuspectsTtlSeconds)});
        }
        for (auto& c : redis::in_transaction_if_removed(
                 {"LREM", keys_.working(identity_, u.queue), "1", u.payload}, std::move(back)))
            out.push_back(std::move(c));
    }
    // What a job given back acquired ahead of its middlewares (refill_acquirer.hpp), after the
    // requeue: idempotent releases, outside the transaction.
    for (const auto& u : units) release_acquired(u, out);
    return out;
}

}  // namespace kiqd
