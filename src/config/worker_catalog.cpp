#include "config/worker_catalog.hpp"

#include <fmt/format.h>

#include <set>

namespace kiqd {

WorkerCatalog::WorkerCatalog(const Config& config, const HandlerRegistry& handlers)
    : rules_(config.routing_rules) {
    for (const auto& [cls, decl] : handlers.declarations()) {
        validate_metadata("handler registration " + cls, decl.metadata);
        entries_[cls] = Entry{decl.metadata, decl.queue, ""};
    }
    for (const auto& [cls, spec] : config.classes) {
        // A `handlers:` entry with only exec/lock keys declares nothing about the worker.
        if (!spec.metadata.declared && spec.queue.empty() && !entries_.count(cls)) continue;
        auto& e = entries_[cls];
        if (spec.metadata.declared) e.metadata = spec.metadata;
        if (!spec.queue.empty()) e.declared_queue = spec.queue;
    }
    for (auto& [cls, e] : entries_) {
        e.queue = routed_queue(cls).value_or("default");
        if (e.metadata.resource_boundary == ResourceBoundary::cpu) any_cpu_ = true;
    }
}

const WorkerCatalog::Entry* WorkerCatalog::find(const std::string& job_class) const {
    auto it = entries_.find(job_class);
    return it == entries_.end() ? nullptr : &it->second;
}

const WorkerMetadata& WorkerCatalog::metadata(const std::string& job_class) const {
    const Entry* e = find(job_class);
    return e ? e->metadata : defaults_;
}

std::optional<std::string> WorkerCatalog::routed_queue(const std::string& job_class) const {
    const Entry* e = find(job_class);
    const std::string own = e ? e->declared_queue : "";
    const std::string fallback = "default";
    const WorkerAttributes w{job_class, own.empty() ? fallback : own, e ? e->metadata : defaults_};
    for (const auto& rule : rules_) {
        if (!rule.selector.matches(w)) continue;
        if (!rule.queue.empty()) return rule.queue;
        break;  // a null queue: the class keeps its own
    }
    if (!own.empty()) return own;
    return std::nullopt;
}

std::vector<QueueWeight> WorkerCatalog::select(const WorkerSelector& selector,
                                               const std::vector<QueueWeight>& configured) const {
    std::vector<QueueWeight> out;
    std::set<std::string> seen;
    for (const auto& [cls, e] : entries_) {
        if (!selector.matches({cls, e.queue, e.metadata})) continue;
        if (!seen.insert(e.queue).second) continue;
        int weight = 1;
        for (const auto& q : configured)
            if (q.name == e.queue) weight = std::max(q.weight, 1);
        out.push_back({e.queue, weight});
    }
    return out;
}

void apply_selector(Config& config, const WorkerCatalog& catalog, const std::string& key) {
    if (config.selector.empty()) return;
    WorkerSelector selector;
    try {
        selector = WorkerSelector::parse(config.selector);
    } catch (const std::invalid_argument& e) {
        throw ConfigError(key, e.what(), config.selector_line);
    }
    auto queues = catalog.select(selector, config.queues);
    if (queues.empty())
        throw ConfigError(key,
                          fmt::format("'{}' matches no declared worker ({} declared: give classes "
                                      "urgency/resource_boundary/... and queue under handlers:)",
                                      config.selector, catalog.entries().size()),
                          config.selector_line);
    config.queues = std::move(queues);
}

}  // namespace kiqd
