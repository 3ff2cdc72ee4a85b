#include "kiqd/heartbeat.hpp"

#include <fmt/format.h>

#include <ctime>
#include <nlohmann/json.hpp>
#include <thread>

#include "kiqd/raw_json_object.hpp"

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

}  // namespace

Heartbeat::Heartbeat(Runtime& rt, const ProcessIdentity& me, std::string info_json)
    : rt_(rt), me_(me), info_json_(std::move(info_json)), conn_(rt.connection_options) {}

std::chrono::seconds Heartbeat::period() const {
    return std::chrono::seconds(rt_.config.compat == Compat::v6 ? 5 : 10);
}

void Heartbeat::flush_and_publish_work(long long processed, long long failed) {
    const auto& k = rt_.keys;
    const std::string date = utc_date();
    std::vector<redis::Command> cmds{{"MULTI"}};
    for (auto [name, n] :
         {std::pair<const char*, long long>{"processed", processed}, {"failed", failed}}) {
        cmds.push_back({"INCRBY", k.stat(name), std::to_string(n)});
        cmds.push_back({"INCRBY", k.stat_daily(name, date), std::to_string(n)});
        cmds.push_back({"EXPIRE", k.stat_daily(name, date), kStatsTtl});
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
}

std::optional<std::string> Heartbeat::beat() {
    const long long processed = rt_.work.processed.exchange(0);
    const long long failed = rt_.work.failed.exchange(0);
    try {
        flush_and_publish_work(processed, failed);
    } catch (const redis::Error& e) {
        rt_.work.processed.fetch_add(processed);  // keep the counts for the next beat
        rt_.work.failed.fetch_add(failed);
        rt_.health.failed(e);
        return std::nullopt;
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
        if (rt_.config.compat == Compat::v8) {
            hset.push_back("concurrency");
            hset.push_back(std::to_string(rt_.config.concurrency));
        }
        auto replies = conn_.pipeline({{"MULTI"},
                                       {"SADD", k.processes(), me_.identity},
                                       {"EXISTS", id},
                                       hset,
                                       {"EXPIRE", id, "60"},
                                       {"RPOP", k.signals(me_.identity)},
                                       {"EXEC"}});
        rt_.health.succeeded();
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
        conn_.command({"EVAL",
                       "if redis.call('exists', KEYS[1]) == 1 then "
                       "redis.call('hset', KEYS[1], 'quiet', 'true') end return 0",
                       "1", rt_.keys.process(me_.identity)});
    } catch (const redis::Error& e) {
        rt_.health.failed(e);  // the next beat writes it anyway
    }
}

void Heartbeat::clear() {
    long long processed = rt_.work.processed.exchange(0);
    long long failed = rt_.work.failed.exchange(0);
    for (int attempt = 0; attempt < 5; ++attempt) {
        try {
            if (processed || failed) {
                flush_and_publish_work(processed, failed);
                processed = failed = 0;  // flushed: a retry of the SREM must not count them again
            }
            std::vector<redis::Command> cmds{{"SREM", rt_.keys.processes(), me_.identity}};
            cmds.push_back({"UNLINK", rt_.keys.work(me_.identity, rt_.config.compat)});
            cmds.push_back({"UNLINK", rt_.keys.work(me_.identity, Compat::v7)});
            conn_.pipeline(cmds);
            return;
        } catch (const redis::Error& e) {
            rt_.log.warn("could not clear the heartbeat record ({}), retrying", e.what());
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    }
    rt_.log.error("gave up clearing the heartbeat; lost stats: processed={} failed={}", processed,
                  failed);
}

}  // namespace kiqd
