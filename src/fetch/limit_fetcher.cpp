#include "fetch/limit_fetcher.hpp"

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

namespace kiqd {
namespace {

// One place for each queue of the order that may give a job now, the gem's rules exactly:
// a paused queue is skipped; a queue with a limit or a block counts the places taken
// (LLEN probed); a process limit counts this process's places; once a queue that blocks has
// places taken, the queues after it are skipped, except those it names ("a,b"). Returns the
// queues it took a place in, in order.
// ARGV: the key prefix, this process's id, then the queue names.
constexpr const char* kAcquire = R"lua(
local prefix = ARGV[1] .. 'limit_fetch:'
local me = ARGV[2]
local available, unblocked = {}, {}
local blocking = false
for i = 3, #ARGV do
  local queue = ARGV[i]
  if not blocking or unblocked[queue] then
    local probed = prefix .. 'probed:' .. queue
    local v = redis.call('mget', prefix .. 'pause:' .. queue, prefix .. 'limit:' .. queue,
                         prefix .. 'process_limit:' .. queue, prefix .. 'block:' .. queue)
    if not v[1] then
      local limit, process_limit, block = tonumber(v[2]), tonumber(v[3]), v[4]
      local locks, mine = 0, 0
      if block or limit then locks = redis.call('llen', probed) end
      if process_limit then
        for _, p in ipairs(redis.call('lrange', probed, 0, -1)) do
          if p == me then mine = mine + 1 end
        end
      end
      if not blocking then blocking = block and locks > 0 end
      if blocking and block and block ~= 'true' then
        for name in string.gmatch(block, '[^,]+') do unblocked[name] = true end
      end
      if (not limit or limit > locks) and (not process_limit or process_limit > mine) then
        redis.call('rpush', probed, me)
        available[#available + 1] = queue
      end
    end
  end
end
return available
)lua";

}  // namespace

LimitFetcher::LimitFetcher(const Keys& keys, const QueueOrder& order, std::string id)
    : keys_(keys),
      order_(order),
      id_(std::move(id)),
      acquire_(std::make_unique<redis::Script>(kAcquire)) {}

void LimitFetcher::append_release(const std::string& queue,
                                  std::vector<redis::Command>& out) const {
    out.push_back({"LREM", keys_.limit_fetch("busy", queue), "1", id_});
    out.push_back({"LREM", keys_.limit_fetch("probed", queue), "1", id_});
}

std::optional<UnitOfWork> LimitFetcher::retrieve_work(redis::Connection& conn, std::mt19937_64& rng,
                                                      size_t,
                                                      std::vector<redis::Command>& pending) const {
    if (order_.all_paused()) return wait_all_paused(conn, pending, kTimeoutSeconds);
    thread_local std::vector<const std::string*> names;
    order_.order(rng, names);
    if (names.empty()) return wait_all_paused(conn, pending, kTimeoutSeconds);
    std::vector<std::string> args{keys_.prefix(), id_};
    for (const auto* n : names) args.push_back(*n);
    const auto reply = acquire_->run_after(conn, &pending, {}, args);
    std::vector<std::string> available;
    for (size_t i = 0; i < reply.size(); ++i)
        if (auto name = reply[i].optional_str()) available.push_back(std::move(*name));
    if (available.empty()) {
        // Every queue is at its limit (or paused, or blocked): the gem waits its fetch timeout.
        std::this_thread::sleep_for(std::chrono::seconds(kTimeoutSeconds));
        return std::nullopt;
    }
    redis::Command brpop{"BRPOP"};
    for (const auto& q : available) brpop.push_back(keys_.queue(q));
    brpop.push_back(std::to_string(kTimeoutSeconds));
    std::optional<UnitOfWork> unit;
    std::vector<redis::Command> give_back;
    try {
        const auto popped = conn.command(brpop);
        if (!popped.is_nil()) {
            unit = UnitOfWork{std::string(keys_.queue_name(*popped[0].optional_str())),
                              *popped[1].optional_str()};
        }
    } catch (...) {
        // The places taken must not outlive a failed pop: given back with the next write.
        for (const auto& q : available)
            pending.push_back({"LREM", keys_.limit_fetch("probed", q), "1", id_});
        throw;
    }
    // The other queues' places go back at once (another process may be waiting for them); the
    // job keeps its own until its outcome is written.
    bool kept = false;
    for (const auto& q : available) {
        if (unit && !kept && q == unit->queue) {
            kept = true;
            give_back.push_back({"RPUSH", keys_.limit_fetch("busy", q), id_});
            continue;
        }
        give_back.push_back({"LREM", keys_.limit_fetch("probed", q), "1", id_});
    }
    try {
        conn.pipeline_unchecked(give_back);
    } catch (const redis::Error&) {
        // The job is in hand and must run; what could not be written goes with the next write.
        for (auto& c : give_back) pending.push_back(std::move(c));
        if (!unit) throw;
    }
    return unit;
}

std::vector<redis::Command> LimitFetcher::with_acknowledgement(
    const UnitOfWork& unit, std::vector<redis::Command> outcome) const {
    append_release(unit.queue, outcome);
    return redis::in_transaction(std::move(outcome));
}

std::vector<redis::Command> LimitFetcher::unmark_started_commands(const UnitOfWork& unit) const {
    std::vector<redis::Command> out;
    append_release(unit.queue, out);
    return out;
}

std::vector<redis::Command> LimitFetcher::requeue_commands(
    const std::vector<UnitOfWork>& units) const {
    std::vector<redis::Command> out;
    for (const auto& u : units) {
        out.push_back({"RPUSH", keys_.queue(u.queue), u.payload});
        append_release(u.queue, out);
    }
    return redis::in_transaction(std::move(out));
}

namespace {
constexpr auto kBeat = std::chrono::seconds(5);  // the gem's REFRESH_TIMEOUT
constexpr int kHeartbeatTtl = 20;                // the gem's HEARTBEAT_TTL
}  // namespace

LimitFetchMonitor::LimitFetchMonitor(const Config& config, const Keys& keys,
                                     std::vector<std::string> queues, std::string id,
                                     redis::ConnectionOptions options, spdlog::logger& log)
    : config_(config.limit_fetch),
      keys_(keys),
      queues_(std::move(queues)),
      id_(std::move(id)),
      options_(std::move(options)),
      log_(log),
      worker_("limit-fetch", log) {}

LimitFetchMonitor::~LimitFetchMonitor() {
    stop();
}

void LimitFetchMonitor::write_limits(redis::Connection& conn) {
    // As the gem's Queues#start: the limits the config names, and the blocks (every queue of
    // this process unblocked first). Unlike the gem, a queue the config names no limit for keeps
    // the one it has: a limit set from Ruby (`Sidekiq::Queue["q"].limit = 2`) stays.
    std::vector<redis::Command> cmds;
    for (const auto& [q, n] : config_.limits)
        cmds.push_back({"SET", keys_.limit_fetch("limit", q), std::to_string(n)});
    for (const auto& [q, n] : config_.process_limits)
        cmds.push_back({"SET", keys_.limit_fetch("process_limit", q), std::to_string(n)});
    if (!config_.blocking.empty()) {
        for (const auto& q : queues_) cmds.push_back({"DEL", keys_.limit_fetch("block", q)});
        for (const auto& group : config_.blocking) {
            if (group.size() == 1) {
                cmds.push_back({"SET", keys_.limit_fetch("block", group[0]), "1"});
                continue;
            }
            std::string names;
            for (const auto& q : group) names += (names.empty() ? "" : ",") + q;
            for (const auto& q : group)
                cmds.push_back({"SET", keys_.limit_fetch("block", q), names});
        }
    }
    if (!cmds.empty()) conn.pipeline(cmds);
}

void LimitFetchMonitor::start() {
    try {
        redis::Connection conn(options_);
        write_limits(conn);
    } catch (const redis::Error& e) {
        log_.warn("limit fetch: could not write the configured queue limits: {}", e.what());
    }
    worker_.start(std::chrono::seconds(0), kBeat, [this] { round(); });
}

void LimitFetchMonitor::round() {
    try {
        if (!conn_) conn_ = std::make_unique<redis::Connection>(options_);
        auto& conn = *conn_;
        conn.pipeline({{"MULTI"},
                       {"SET", keys_.limit_heartbeat(id_), "1"},
                       {"SADD", keys_.limit_processes(), id_},
                       {"EXPIRE", keys_.limit_heartbeat(id_), std::to_string(kHeartbeatTtl)},
                       {"EXEC"}});
        // Processes whose heartbeat is gone leave the set, and their places and busy notes
        // leave this process's queues (the gem's invalidate_old_processes).
        std::vector<std::string> processes;
        const auto members = conn.command({"SMEMBERS", keys_.limit_processes()});
        for (size_t i = 0; i < members.size(); ++i)
            if (auto p = members[i].optional_str()) processes.push_back(std::move(*p));
        std::vector<redis::Command> gets;
        for (const auto& p : processes) gets.push_back({"GET", keys_.limit_heartbeat(p)});
        const auto beats = conn.pipeline(gets);
        std::set<std::string> alive;
        std::vector<redis::Command> cleanup;
        for (size_t i = 0; i < processes.size(); ++i) {
            if (beats[i].optional_str() == std::optional<std::string>("1"))
                alive.insert(processes[i]);
            else
                cleanup.push_back({"SREM", keys_.limit_processes(), processes[i]});
        }
        std::vector<redis::Command> ranges;
        for (const auto& q : queues_)
            ranges.push_back({"LRANGE", keys_.limit_fetch("probed", q), "0", "-1"});
        const auto probed = conn.pipeline(ranges);
        for (size_t i = 0; i < queues_.size(); ++i) {
            std::set<std::string> holders;
            for (size_t j = 0; j < probed[i].size(); ++j)
                if (auto p = probed[i][j].optional_str()) holders.insert(std::move(*p));
            for (const auto& p : holders) {
                if (alive.count(p)) continue;
                cleanup.push_back({"LREM", keys_.limit_fetch("probed", queues_[i]), "0", p});
                cleanup.push_back({"LREM", keys_.limit_fetch("busy", queues_[i]), "0", p});
                log_.info("limit fetch: process {} is gone; its places in queue {} are freed", p,
                          queues_[i]);
            }
        }
        if (!cleanup.empty()) conn.pipeline(cleanup);
    } catch (const redis::Error& e) {
        conn_.reset();
        log_.debug("limit fetch heartbeat: {}", e.what());
    }
}

void LimitFetchMonitor::stop() {
    if (!worker_.stop()) return;
    try {
        redis::Connection conn(options_);
        conn.pipeline(
            {{"SREM", keys_.limit_processes(), id_}, {"DEL", keys_.limit_heartbeat(id_)}});
    } catch (const redis::Error&) {
        // The heartbeat expires by itself; other processes then free what is left.
    }
}

}  // namespace kiqd
