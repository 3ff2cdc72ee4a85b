#include "job/dead_set.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <random>

#include "job/backtrace_codec.hpp"
#include "job/raw_json_object.hpp"
#include "redis/transaction.hpp"

namespace kiqd {

std::string new_jid() {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    return fmt::format("{:016x}{:08x}", rng(), static_cast<uint32_t>(rng()));
}

std::vector<redis::Command> DeadSet::entry_commands(const std::string& payload, double now) const {
    std::vector<redis::Command> commands{{"ZADD", keys_.dead(), score_text(now), payload}};
    for (auto& trim : trim_commands(now)) commands.push_back(std::move(trim));
    return commands;
}

std::vector<redis::Command> DeadSet::trim_commands(double now) const {
    return {
        {"ZREMRANGEBYSCORE", keys_.dead(), "-inf", score_text(now - timeout_seconds())},
        // Sidekiq trims with rank -max_jobs, which keeps max_jobs - 1 entries; kept as is.
        {"ZREMRANGEBYRANK", keys_.dead(), "0", std::to_string(-max_jobs())},
    };
}

std::vector<redis::Command> DeadSet::kill_commands(const std::string& payload, double now) const {
    return redis::in_transaction(entry_commands(payload, now));
}

void DeadSet::kill(redis::Connection& conn, const std::string& payload) const {
    conn.pipeline(kill_commands(payload, epoch_seconds()));
}

std::string DeadSet::invalid_entry(const std::string& raw, const std::string& queue,
                                   const InvalidJob& why) const {
    const std::string now = payload_timestamp(compat_);
    if (auto obj = RawJsonObject::parse(raw)) {
        if (!obj->contains("jid")) obj->set_string("jid", new_jid());
        if (!obj->contains("queue")) obj->set_string("queue", queue);
        obj->set_string("error_class", why.error_class);
        obj->set_string("error_message", why.error_message);
        obj->set("failed_at", now);
        return obj->dump();
    }
    RawJsonObject wrapper;
    wrapper.set_string("class", "Kiqd::InvalidJob");
    bool utf8 = true;
    try {
        (void)nlohmann::json(raw).dump();  // strict: throws on invalid UTF-8
    } catch (const nlohmann::json::exception&) {
        utf8 = false;
    }
    wrapper.set("args", "[" + json_string(utf8 ? raw : base64_encode(raw)) + "]");
    if (!utf8) wrapper.set("kiqd_raw_base64", "true");
    wrapper.set_string("queue", queue);
    wrapper.set_string("jid", new_jid());
    wrapper.set("retry", "0");  // re-running it from the Web UI sends it straight back here
    wrapper.set("created_at", now);
    wrapper.set("enqueued_at", now);
    wrapper.set_string("error_class", why.error_class);
    wrapper.set_string("error_message", why.error_message);
    wrapper.set("failed_at", now);
    return wrapper.dump();
}

}  // namespace kiqd
