// Queue lists and Sidekiq 7's `capsules:` (capsules_config.hpp).
#include "config/capsules_config.hpp"

#include <map>

#include "config/yaml_helpers.hpp"

namespace kiqd::config_detail {

namespace {

int queue_weight(const std::string& key, const YAML::Node& n) {
    const long long w = as_int(key + ".weight", n);
    if (w < 1) throw ConfigError(key, "weight must be at least 1", line_of(n));
    if (w > 1000) throw ConfigError(key, "weight must be at most 1000", line_of(n));
    return static_cast<int>(w);
}

}  // namespace

std::vector<QueueWeight> parse_queue_list(const std::string& key, const YAML::Node& n,
                                          bool split_commas) {
    if (!n.IsSequence()) type_error(key, n, "a list of names or [name, weight] pairs");
    std::vector<QueueWeight> out;
    for (size_t i = 0; i < n.size(); ++i) {
        const auto& item = n[i];
        const std::string item_key = key + "[" + std::to_string(i) + "]";
        QueueWeight q;
        if (item.IsScalar()) {
            q.name = strip_symbol(item.Scalar());
            const auto comma = q.name.find(',');
            if (split_commas && comma != std::string::npos) {
                YAML::Node weight(q.name.substr(comma + 1));
                q.name.resize(comma);
                q.weight = queue_weight(item_key, weight);
            }
        } else if (item.IsSequence() && (item.size() == 1 || item.size() == 2)) {
            q.name = as_symbol(item_key, item[0]);
            if (item.size() == 2) q.weight = queue_weight(item_key, item[1]);
        } else {
            type_error(item_key, item, "a queue name or a [name, weight] pair");
        }
        out.push_back(std::move(q));
    }
    if (out.empty()) throw ConfigError(key, "is empty: list at least one queue", line_of(n));
    return out;
}

std::vector<CapsuleConfig> parse_capsules(const YAML::Node& n) {
    if (!n.IsMap()) type_error("capsules", n, "a map of capsule names to {concurrency, queues}");
    std::vector<CapsuleConfig> out;
    for (const auto& kv : n) {
        CapsuleConfig cap;
        cap.name = kv.first.IsScalar() ? strip_symbol(kv.first.Scalar()) : "";
        cap.line = line_of(kv.first);
        const std::string key = "capsules." + cap.name;
        if (cap.name.empty()) throw ConfigError("capsules", "a capsule needs a name", cap.line);
        // Sidekiq's config.capsule("default") is the top-level queues and concurrency.
        if (cap.name == "default")
            throw ConfigError(key,
                              "is the top-level queues and concurrency; give this capsule "
                              "another name",
                              cap.line);
        check_queue_name(key, cap.name, cap.line);  // the same safe characters as a queue name
        if (!kv.second.IsMap()) type_error(key, kv.second, "a map with concurrency and queues");
        read_map(kv.second, key,
                 {{"concurrency",
                   [&](const auto& k, const auto& v) {
                       const long long c = as_int(k, v);
                       if (c < 1 || c > 1000)
                           throw ConfigError(k, "must be between 1 and 1000", line_of(v));
                       cap.concurrency = static_cast<int>(c);
                   }},
                  {"queues", [&](const auto& k, const auto& v) {
                       cap.queues = parse_queue_list(k, v, true);
                   }}});
        // Sidekiq 7.3's CLI copies both keys as given: a capsule without them has no threads or
        // no queues, which kiqd refuses rather than run a capsule that does nothing.
        if (cap.concurrency == 0)
            throw ConfigError(key + ".concurrency", "is required (this capsule's threads)",
                              cap.line);
        if (cap.queues.empty())
            throw ConfigError(key + ".queues", "is required (this capsule's queues)", cap.line);
        out.push_back(std::move(cap));
    }
    return out;
}

void check_capsules(const Config& c) {
    if (c.capsules.empty()) return;
    const int line = c.capsules.front().line;
    if (c.fetch == FetchMode::reliable)
        throw ConfigError("capsules",
                          "need fetch: basic: reliable fetch serves one capsule per process "
                          "(run one kiqd per capsule with fetch: reliable)",
                          line);
    if (!c.selector.empty())
        throw ConfigError("capsules",
                          "cannot be combined with a selector, which picks the default "
                          "capsule's queues",
                          line);
    std::map<std::string, std::string> owner;  // queue → the capsule serving it
    for (const auto& q : c.queues) owner[q.name] = "default";
    for (const auto& cap : c.capsules) {
        const std::string key = "capsules." + cap.name + ".queues";
        for (const auto& q : cap.queues) {
            check_queue_name(key, q.name, cap.line);
            const auto [it, added] = owner.emplace(q.name, cap.name);
            if (!added)
                throw ConfigError(key,
                                  it->second == cap.name
                                      ? "queue '" + q.name + "' is listed twice"
                                      : "queue '" + q.name + "' is already served by capsule '" +
                                            it->second + "' (a queue belongs to one capsule)",
                                  cap.line);
            if (c.fair_fetch.find(q.name))
                throw ConfigError(key,
                                  "queue '" + q.name +
                                      "' is a fair_fetch queue: fair queues are served by the "
                                      "default capsule (the top-level queues)",
                                  cap.line);
        }
    }
}

}  // namespace kiqd::config_detail

namespace kiqd {

int total_concurrency(const Config& config) {
    int total = config.concurrency;
    for (const auto& cap : config.capsules) total += cap.concurrency;
    return total;
}

}  // namespace kiqd
