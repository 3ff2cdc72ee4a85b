#include "kiqd/reliable_fetcher.hpp"

namespace kiqd {
namespace {

// KEYS[1..n] queue lists in this fetch's order, KEYS[n+1..2n] their working lists.
// Moves the job at the popping end of the first non-empty queue into its working list and
// returns {index, payload}; nil when every queue is empty.
constexpr const char* kFetchScript = R"lua(
local n = #KEYS / 2
for i = 1, n do
  local job = redis.call('rpoplpush', KEYS[i], KEYS[n + i])
  if job then return {i, job} end
end
return nil
)lua";

}  // namespace

ReliableFetcher::ReliableFetcher(const Keys& keys, const QueueOrder& order, std::string identity)
    : keys_(keys), order_(order), identity_(std::move(identity)), fetch_script_(kFetchScript) {
    for (const auto& name : order_.names()) {
        queue_keys_.push_back(keys_.queue(name));
        working_.emplace_back(name, keys_.working(identity_, name));
    }
}

std::optional<UnitOfWork> ReliableFetcher::retrieve_work(
    redis::Connection& conn, std::mt19937_64& rng, size_t slot,
    std::vector<redis::Command>& pending) const {
    if (!ready_.stop_requested()) {
        ready_.wait_for(std::chrono::seconds(kBlockSeconds));
        return std::nullopt;
    }
    thread_local std::vector<const std::string*> names;
    thread_local std::vector<std::string> keys;
    thread_local unsigned idle_rounds = 0;
    order_.order(rng, names);
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
            if (reply.size() != 2) throw redis::ProtocolError("fetch script: unexpected reply");
            const auto i = static_cast<size_t>(reply[0].integer());  // 1-based over the rest
            if (i < 1 || i > rest) throw redis::ProtocolError("fetch script: index out of range");
            return UnitOfWork{*names[i], std::string(reply[1].str())};
        }
    }
    // Everything was empty: wait on one queue, a different one per idle thread and round.
    const size_t index = (slot + idle_rounds++) % queue_keys_.size();
    auto blocked = conn.command(
        {"BRPOPLPUSH", queue_keys_[index], working_[index].second, std::to_string(kBlockSeconds)});
    if (blocked.is_nil()) return std::nullopt;
    return UnitOfWork{working_[index].first, std::string(blocked.str())};
}

std::vector<redis::Command> ReliableFetcher::with_acknowledgement(
    const UnitOfWork& unit, std::vector<redis::Command> outcome) const {
    redis::Command ack{"LREM", keys_.working(identity_, unit.queue), "1", unit.payload};
    if (outcome.empty()) return {std::move(ack)};
    // The outcome and the acknowledgement land together or not at all.
    std::vector<redis::Command> out;
    out.reserve(outcome.size() + 3);
    out.push_back({"MULTI"});
    for (auto& c : outcome) out.push_back(std::move(c));
    out.push_back(std::move(ack));
    out.push_back({"EXEC"});
    return out;
}

const std::string* ReliableFetcher::working_list(const std::string& queue) const {
    for (const auto& [name, list] : working_)  // a handful of queues: a scan beats a map
        if (name == queue) return &list;
    return nullptr;
}

std::vector<redis::Command> ReliableFetcher::requeue_commands(
    const std::vector<UnitOfWork>& units) const {
    if (units.empty()) return {};
    std::vector<redis::Command> out;
    out.push_back({"MULTI"});
    for (const auto& u : units) {
        out.push_back({"RPUSH", keys_.queue(u.queue), u.payload});
        out.push_back({"LREM", keys_.working(identity_, u.queue), "1", u.payload});
    }
    out.push_back({"EXEC"});
    return out;
}

}  // namespace kiqd
