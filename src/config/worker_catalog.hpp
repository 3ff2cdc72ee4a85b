#pragma once
// WorkerCatalog: the effective metadata and queue of every declared job class, merged once at
// startup from the C++ declarations (HandlerRegistry::add with metadata) and the YAML
// `handlers:` entries (which win: YAML metadata replaces a C++ declaration as a whole, a YAML
// `queue:` wins over a C++ queue), with `routing_rules:` applied. It answers
//   * metadata(cls): for the metadata middleware and the cpu-bound cap (unknown classes get the
//     defaults: low urgency, unknown boundary);
//   * routed_queue(cls): where a job pushed without a queue goes (the client hook);
//   * select(selector): the queues a `--selector` process serves.
// Built on the main thread before the processors start, then read-only and shared without locks.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiqd/config.hpp"
#include "kiqd/handler_registry.hpp"

namespace kiqd {

class WorkerCatalog {
  public:
    WorkerCatalog() = default;
    // Throws ConfigError when a C++ declaration breaks the metadata rules (the YAML was checked
    // when it was parsed).
    WorkerCatalog(const Config& config, const HandlerRegistry& handlers);

    struct Entry {
        WorkerMetadata metadata;
        std::string declared_queue;  // `queue:` or the C++ queue; "" = none
        std::string queue;           // after routing rules; "default" when nothing says
    };
    // nullptr for a class that was never declared.
    const Entry* find(const std::string& job_class) const;
    // The metadata of a class, the defaults for an undeclared one.
    const WorkerMetadata& metadata(const std::string& job_class) const;
    // The queue for a job of this class pushed without an explicit queue: the first matching
    // routing rule's, else the class's declared queue; nullopt when neither says anything.
    std::optional<std::string> routed_queue(const std::string& job_class) const;
    // Queues of the declared classes matching `selector`, in first-seen class order (classes
    // sorted by name), weighted as in `queues:` when listed there, else 1. Empty: none matched.
    std::vector<QueueWeight> select(const WorkerSelector& selector,
                                    const std::vector<QueueWeight>& configured) const;
    const std::map<std::string, Entry>& entries() const { return entries_; }
    bool any_cpu_bound() const { return any_cpu_; }

  private:
    std::map<std::string, Entry> entries_;
    std::vector<RoutingRule> rules_;
    WorkerMetadata defaults_;
    bool any_cpu_ = false;
};

// `--selector`/`selector:`: replaces config.queues with the selected queues. Throws ConfigError
// naming the selector key when the query is bad or selects nothing.
void apply_selector(Config& config, const WorkerCatalog& catalog, const std::string& key);

}  // namespace kiqd
