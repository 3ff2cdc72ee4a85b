#include "kiqd/client.hpp"

#include <map>
#include <stdexcept>

#include "kiqd/dead_set.hpp"

namespace kiqd {

Client::Prepared Client::prepare(nlohmann::ordered_json item) const {
    if (!item.is_object()) throw std::invalid_argument("a job must be a JSON object");
    auto cls = item.find("class");
    if (cls == item.end() || !cls->is_string() || cls->get<std::string>().empty())
        throw std::invalid_argument("job \"class\" must be a non-empty string");
    if (!item.contains("args")) item["args"] = nlohmann::ordered_json::array();
    if (!item["args"].is_array()) throw std::invalid_argument("job \"args\" must be an array");
    if (!item.contains("queue")) {
        std::optional<std::string> routed;
        if (router_) routed = router_(item["class"].get<std::string>());
        item["queue"] = routed.value_or("default");
    }
    if (!item["queue"].is_string()) throw std::invalid_argument("job \"queue\" must be a string");
    if (!item.contains("retry")) item["retry"] = true;
    if (!item.contains("jid")) item["jid"] = new_jid();
    const double now = epoch_seconds();
    const auto ts = nlohmann::ordered_json::parse(payload_timestamp(compat_, now));
    if (!item.contains("created_at")) item["created_at"] = ts;

    Prepared out;
    out.queue = item["queue"].get<std::string>();
    out.jid = item["jid"].is_string() ? item["jid"].get<std::string>() : item["jid"].dump();
    if (auto at = item.find("at"); at != item.end()) {
        if (!at->is_number()) throw std::invalid_argument("job \"at\" must be epoch seconds");
        const double when = at->get<double>();
        item.erase("at");
        if (when > now) {
            item.erase("enqueued_at");
            out.at = when;
            out.payload = item.dump();
            return out;
        }
    }
    item["enqueued_at"] = ts;
    out.payload = item.dump();
    return out;
}

std::vector<redis::Command> Client::push_commands(const std::vector<Prepared>& jobs) const {
    std::vector<redis::Command> cmds;
    std::map<std::string, redis::Command>
        lpush_by_queue;  // one LPUSH per queue, as Ruby's bulk push
    redis::Command zadd{"ZADD", keys_.schedule()};
    for (const auto& j : jobs) {
        if (j.at) {
            zadd.push_back(score_text(*j.at));
            zadd.push_back(j.payload);
            continue;
        }
        auto& cmd = lpush_by_queue[j.queue];
        if (cmd.empty()) cmd = {"LPUSH", keys_.queue(j.queue)};
        cmd.push_back(j.payload);
    }
    for (auto& [queue, lpush] : lpush_by_queue) {
        cmds.push_back({"SADD", keys_.queues(), queue});
        cmds.push_back(std::move(lpush));
    }
    if (zadd.size() > 2) cmds.push_back(std::move(zadd));
    return cmds;
}

std::string Client::push(redis::Connection& conn, nlohmann::ordered_json item) const {
    auto prepared = prepare(std::move(item));
    conn.pipeline(push_commands({prepared}));
    return prepared.jid;
}

std::vector<std::string> Client::push_bulk(redis::Connection& conn,
                                           std::vector<nlohmann::ordered_json> items) const {
    std::vector<Prepared> prepared;
    std::vector<std::string> jids;
    for (auto& item : items) {
        prepared.push_back(prepare(std::move(item)));
        jids.push_back(prepared.back().jid);
    }
    if (!prepared.empty()) conn.pipeline(push_commands(prepared));
    return jids;
}

}  // namespace kiqd
