#include "kiqd/client.hpp"

#include <map>
#include <stdexcept>

#include "config/worker_catalog.hpp"
#include "job/dead_set.hpp"
#include "kiqd/config.hpp"
#include "kiqd/job_context.hpp"
#include "middleware/fair_tenant.hpp"

namespace kiqd {

nlohmann::ordered_json Client::normalize(nlohmann::ordered_json item) const {
    if (!item.is_object()) throw std::invalid_argument("a job must be a JSON object");
    auto cls = item.find("class");
    if (cls == item.end() || !cls->is_string() || cls->get<std::string>().empty())
        throw std::invalid_argument("job \"class\" must be a non-empty string");
    if (!item.contains("args")) item["args"] = nlohmann::ordered_json::array();
    if (!item["args"].is_array()) throw std::invalid_argument("job \"args\" must be an array");
    if (!item.contains("queue") || item["queue"].is_null()) {
        // The class's own queue (sidekiq_options queue:), as Sidekiq merges the class defaults.
        const auto& name = item.contains("wrapped") && item["wrapped"].is_string()
                               ? item["wrapped"].get_ref<const std::string&>()
                               : item["class"].get_ref<const std::string&>();
        std::optional<std::string> routed;
        if (router_) routed = router_(name);
        if (!routed) {
            auto it = class_queues_.find(name);
            if (it != class_queues_.end() && !it->second.empty()) routed = it->second;
        }
        item["queue"] = routed.value_or("default");
    }
    if (!item["queue"].is_string() || item["queue"].get_ref<const std::string&>().empty())
        throw std::invalid_argument("job \"queue\" must be a non-empty string");
    if (!item.contains("retry")) item["retry"] = true;
    if (!item.contains("jid")) item["jid"] = new_jid();
    if (auto at = item.find("at"); at != item.end() && !at->is_number())
        throw std::invalid_argument("job \"at\" must be epoch seconds");
    if (!item.contains("created_at"))
        item["created_at"] =
            nlohmann::ordered_json::parse(payload_timestamp(compat_, epoch_seconds()));
    return item;
}

Client::Prepared Client::finish(nlohmann::ordered_json item) const {
    if (!item.is_object() || !item.contains("queue") || !item["queue"].is_string() ||
        item["queue"].get_ref<const std::string&>().empty())
        throw std::invalid_argument("job \"queue\" must be a non-empty string");
    const double now = epoch_seconds();
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
    item["enqueued_at"] = nlohmann::ordered_json::parse(payload_timestamp(compat_, now));
    out.payload = item.dump();
    return out;
}

Client::Prepared Client::prepare(nlohmann::ordered_json item) const {
    return finish(normalize(std::move(item)));
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
    auto job = normalize(std::move(item));
    if (!chain_.empty() && !chain_.invoke(job, conn)) return "";
    auto prepared = finish(std::move(job));
    conn.pipeline(push_commands({prepared}));
    return prepared.jid;
}

std::vector<std::string> Client::push_bulk(redis::Connection& conn,
                                           std::vector<nlohmann::ordered_json> items) const {
    std::vector<Prepared> prepared;
    std::vector<std::string> jids;
    for (auto& item : items) {
        auto job = normalize(std::move(item));
        if (!chain_.empty() && !chain_.invoke(job, conn)) {
            jids.emplace_back();
            continue;
        }
        prepared.push_back(finish(std::move(job)));
        jids.push_back(prepared.back().jid);
    }
    if (!prepared.empty()) conn.pipeline(push_commands(prepared));
    return jids;
}

Client make_process_client(const Config& config) {
    std::map<std::string, std::string> class_queues;
    for (const auto& [name, spec] : config.classes)
        if (!spec.queue.empty()) class_queues[name] = spec.queue;
    ClientMiddlewareChain chain;
    Keys keys(config.redis.key_prefix);
    chain.add(std::make_shared<FairTenantClientMiddleware>(config, keys));
    Client client(keys, config.compat, std::move(chain), std::move(class_queues));
    if (!config.routing_rules.empty()) {
        // `routing_rules:` over the YAML's declarations (a kiqd process's Launcher replaces this
        // with its catalog, which also knows the classes declared in C++).
        auto catalog = std::make_shared<const WorkerCatalog>(config, HandlerRegistry{});
        client.set_router(
            [catalog](const std::string& job_class) { return catalog->routed_queue(job_class); });
    }
    return client;
}

std::string JobContext::enqueue(nlohmann::ordered_json item) const {
    if (!client) throw std::logic_error("this JobContext has no client to enqueue with");
    return client->push(redis, std::move(item));
}

std::vector<std::string> JobContext::enqueue_bulk(std::vector<nlohmann::ordered_json> items) const {
    if (!client) throw std::logic_error("this JobContext has no client to enqueue with");
    return client->push_bulk(redis, std::move(items));
}

}  // namespace kiqd
