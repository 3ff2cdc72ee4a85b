// Heartbeat: the process record, busy hash and stats flush of a Sidekiq cluster member (see
// heartbeat.hpp for the keys and the idempotent flush).
#include "server/heartbeat.hpp"

#include <fmt/format.h>

#include <ctime>
#include <nlohmann/json.hpp>
#include <thread>

#include "handlers/runner_handler.hpp"
#include "job/raw_json_object.hpp"
#include "server/connection_budget.hpp"
#include "server/execution_metrics.hpp"

namespace kiqd {
namespace {

std::string utc_date() {
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[16];
    std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
    return buf;
}

constexpr const char* kStatsTtl = "157680000";  // 5 years, as Sidekiq sets on the daily keys
// How long the last applied sequence number is remembered: a retry of a flush whose reply was
// lost later than this could count twice. Outages are far shorter; one small key per process.
constexpr const char* kFlushMarkerTtl = "604800";  // a week

// Applies one batch of the stats counts, unless a batch with this sequence number (or a later
// one) was applied already: the retry of a flush whose reply was lost counts nothing twice.
//
// KEYS[1] <identity>:flushed — the sequence number of the last batch applied (absent: 0)
// KEYS[2] stat:processed
// KEYS[3] stat:processed:<date>
// KEYS[4] stat:failed
// KEYS[5] stat:failed:<date>
// ARGV[1] the batch's sequence number
// ARGV[2] jobs processed in the batch (INCRBY on KEYS[2] and KEYS[3])
// ARGV[3] jobs failed in the batch (INCRBY on KEYS[4] and KEYS[5])
// ARGV[4] TTL of the daily keys in seconds (set again at every flush)
// ARGV[5] TTL of KEYS[1] in seconds
//
// Returns 1 when the batch was applied (KEYS[1] set to ARGV[1], the four counters increased),
// 0 when ARGV[1] is not above KEYS[1] (nothing written), an error with nothing written when a
// counter is not a string holding an integer (Redis keeps a script's writes before a failing
// command, so a failing INCRBY after the SET would lose the batch: every counter is read first).
constexpr const char* kFlushScript = R"lua(
local last = tonumber(redis.call('get', KEYS[1]) or '0')
if tonumber(ARGV[1]) <= last then return 0 end
for i = 2, 5 do
  local v = redis.call('get', KEYS[i])
  if v and not string.match(v, '^%-?%d+$') then
    return redis.error_reply('ERR ' .. KEYS[i] .. ' does not hold an integer; nothing was written')
  end
end
redis.call('set', KEYS[1], ARGV[1], 'EX', ARGV[5])
redis.call('incrby', KEYS[2], ARGV[2])
redis.call('incrby', KEYS[3], ARGV[2])
redis.call('expire', KEYS[3], ARGV[4])
redis.call('incrby', KEYS[4], ARGV[3])
redis.call('incrby', KEYS[5], ARGV[3])
redis.call('expire', KEYS[5], ARGV[4])
return 1
)lua";

}  // namespace

redis::Command stats_flush_command(const Keys& keys, const std::string& identity, long long seq,
                                   long long processed, long long failed, const std::string& date) {
    return {"EVAL",
            kFlushScript,
            "5",
            keys.process(identity) + ":flushed",
            keys.stat("processed"),
            keys.stat_daily("processed", date),
            keys.stat("failed"),
            keys.stat_daily("failed", date),
            std::to_string(seq),
            std::to_string(processed),
            std::to_string(failed),
            kStatsTtl,
            kFlushMarkerTtl};
}

Heartbeat::Heartbeat(Runtime& rt, const ProcessIdentity& me, std::string info_json)
    : rt_(rt),
      me_(me),
      info_json_(std::move(info_json)),
      conn_(named_connection(rt.connection_options, rt.identity, "heartbeat")),
      compat_(rt.config),
      eviction_(rt.log) {
    if (rt_.execution_metrics) rt_.execution_metrics->enable(compat_.decision().metrics);
}

std::chrono::seconds Heartbeat::period() const {
    return std::chrono::seconds(compat_.decision().major == 6 ? 5 : 10);
}

void Heartbeat::flush_and_publish_work() {
    const auto& k = rt_.keys;
    // A batch that failed before stays as it was (same numbers, same seq): Redis may already
    // have applied it. Counts made since then wait in the counters for the next batch.
    if (!pending_)
        pending_ =
            StatsBatch{++flush_seq_, rt_.work.processed.exchange(0), rt_.work.failed.exchange(0)};
    // The date of the daily keys is the date of the first attempt's send, as near as matters.
    std::vector<redis::Command> cmds{
        {"MULTI"},
        stats_flush_command(k, me_.identity, pending_->seq, pending_->processed, pending_->failed,
                            utc_date())};
    // The execution metrics since the last beat, in this round trip. Inside the MULTI an error
    // (a key of another type) stays in EXEC's reply and costs the stats nothing. A failed write
    // drops the batch, as Sidekiq does: HINCRBY is not idempotent (execution_metrics.hpp).
    if (rt_.execution_metrics) {
        const auto layouts = compat_.decision().metrics;
        for (auto& c : ExecutionMetrics::flush_commands(rt_.execution_metrics->take(), k,
                                                        std::time(nullptr), layouts))
            cmds.push_back(std::move(c));
    }
    // The busy hash: one field per running job, {"queue","payload" (a JSON *string*),"run_at"}.
    // 6.4 readers use :workers, 6.5+ and the unique-jobs reaper use :work; in 6 mode write both.
    std::vector<std::string> work_keys{k.work(me_.identity, rt_.config.compat)};
    if (rt_.config.compat == Compat::v6) work_keys.push_back(k.work(me_.identity, Compat::v7));
    const auto running = rt_.work.snapshot();
    for (const auto& key : work_keys) {
        cmds.push_back({"UNLINK", key});
        if (running.empty()) continue;
        redis::Command hset{"HSET", key};
        for (const auto& e : running) {
            hset.push_back(*e.tid);
            hset.push_back("{\"queue\":" + json_string(e.job.queue) +
                           ",\"payload\":" + json_string(e.job.payload) +
                           ",\"run_at\":" + std::to_string(e.job.run_at) + "}");
        }
        cmds.push_back(std::move(hset));
        cmds.push_back({"EXPIRE", key, "60"});
    }
    cmds.push_back({"EXEC"});
    conn_.pipeline(cmds);
    pending_.reset();
}

void Heartbeat::detect_cluster() {
    if (!compat_.automatic()) return;
    try {
        if (auto change = compat_.refresh(conn_, rt_.keys, me_.identity))
            rt_.log.info("{}", *change);
    } catch (const redis::Error& e) {
        rt_.health.failed(e);  // the previous decision stands
    }
    if (rt_.execution_metrics) rt_.execution_metrics->enable(compat_.decision().metrics);
}

std::optional<std::string> Heartbeat::beat() {
    // The stats batch is the beat's first command: when Redis stalls, it is the batch that
    // times out (applied later or not, the seq makes its retry idempotent), not a read before
    // it that would leave the batch unsent. The cluster is read after it, so a new decision
    // takes effect from the next beat's flush.
    try {
        flush_and_publish_work();
    } catch (const redis::Error& e) {
        rt_.health.failed(e);  // the batch stays pending for the next beat
        return std::nullopt;
    }
    detect_cluster();
    try {
        // At start (the first beat) and whenever it changes: an evicting Redis loses jobs.
        eviction_.check(conn_);
    } catch (const redis::Error& e) {
        rt_.health.failed(e);
    }
    try {
        const auto t0 = std::chrono::steady_clock::now();
        conn_.command({"PING"});
        const auto rtt_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                std::chrono::steady_clock::now() - t0)
                                .count();
        const auto& k = rt_.keys;
        const std::string id = k.process(me_.identity);
        redis::Command hset{"HSET",   id,
                            "info",   info_json_,
                            "busy",   std::to_string(rt_.work.busy()),
                            "beat",   score_text(epoch_seconds()),
                            "quiet",  rt_.lifecycle.is_quiet() ? "true" : "false",
                            "rss",    std::to_string(current_rss_kb()),
                            "rtt_us", std::to_string(rtt_us)};
        // Sidekiq 8.1 reads the process's concurrency from this field (0 when absent); 6 and 7
        // read only the fields they name, so auto writes it too.
        if (rt_.config.compat == Compat::v8 || rt_.config.compat_auto) {
            hset.push_back("concurrency");
            hset.push_back(std::to_string(total_concurrency(rt_.config)));
        }
        if (!capsules_.empty()) {
            // A field of kiqd's own, like kiqd_runners: {"default": {"busy": 1,
            // "concurrency": 5}, "reports": {...}}.
            nlohmann::ordered_json caps = nlohmann::ordered_json::object();
            for (const auto& c : capsules_)
                caps[c.name] = {{"busy", rt_.work.busy_in(c.first_slot, c.threads)},
                                {"concurrency", c.threads}};
            hset.push_back("kiqd_capsules");
            hset.push_back(caps.dump());
        }
        // The runner children (pid, state, jobs, RSS), for `kiqd processes`. A field of kiqd's
        // own: Sidekiq's tools read the fields they name (HMGET) and never see it.
        if (std::string runners = runner_children_json(); !runners.empty()) {
            hset.push_back("kiqd_runners");
            hset.push_back(std::move(runners));
        }
        auto replies = conn_.pipeline({{"MULTI"},
                                       {"SADD", k.processes(), me_.identity},
                                       {"EXISTS", id},
                                       hset,
                                       {"EXPIRE", id, "60"},
                                       {"RPOP", k.signals(me_.identity)},
                                       {"EXEC"}});
        rt_.health.wrote(t0);  // the transaction's writes were accepted
        const auto& exec = replies.back();
        if (exec.size() == 5 && exec[1].is_integer() && exec[1].integer() == 0)
            rt_.log.debug("heartbeat registered {} (first beat or after an outage)", me_.identity);
        if (exec.size() == 5 && !exec[4].is_nil()) return std::string(exec[4].str());
    } catch (const redis::Error& e) {
        rt_.health.failed(e);
    }
    return std::nullopt;
}

void Heartbeat::publish_quiet() {
    try {
        // Only when the hash exists: HSET alone would create a record without "info" or a TTL.
        // KEYS[1] this process's record (the <identity> hash); no ARGV. Sets its `quiet` field
        // to "true" when the hash exists, else writes nothing. Returns 0 either way.
        conn_.command({"EVAL",
                       "if redis.call('exists', KEYS[1]) == 1 then "
                       "redis.call('hset', KEYS[1], 'quiet', 'true') end return 0",
                       "1", rt_.keys.process(me_.identity)});
    } catch (const redis::Error& e) {
        rt_.health.failed(e);  // the next beat writes it anyway
    }
}

void Heartbeat::clear() {
    for (int attempt = 0; attempt < 5; ++attempt) {
        try {
            // A pending batch first, then whatever the counters hold (normally nothing by now).
            const auto started = std::chrono::steady_clock::now();
            while (pending_ || rt_.work.processed.load() || rt_.work.failed.load())
                flush_and_publish_work();
            std::vector<redis::Command> cmds{{"SREM", rt_.keys.processes(), me_.identity}};
            cmds.push_back({"UNLINK", rt_.keys.work(me_.identity, rt_.config.compat)});
            cmds.push_back({"UNLINK", rt_.keys.work(me_.identity, Compat::v7)});
            conn_.pipeline(cmds);
            // An outage that ended since the last beat is logged as over by now at the latest.
            rt_.health.wrote(started, RedisHealth::Write::any);
            return;
        } catch (const redis::Error& e) {
            rt_.log.warn("could not clear the heartbeat record ({}), retrying", e.what());
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    }
    const long long processed = rt_.work.processed.load() + (pending_ ? pending_->processed : 0);
    const long long failed = rt_.work.failed.load() + (pending_ ? pending_->failed : 0);
    rt_.log.error("gave up clearing the heartbeat; stats possibly lost: processed={} failed={}",
                  processed, failed);
}

}  // namespace kiqd
