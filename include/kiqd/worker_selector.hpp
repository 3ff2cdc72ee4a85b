#pragma once
// WorkerSelector: GitLab's worker matching query (docs.gitlab.com, "Processing specific job
// classes"), used by `routing_rules:` (which queue a class's jobs go to) and `kiqd --selector`
// (which queues a process serves). Syntax, loosest binding first:
//   a|b        either side matches
//   a&b        both sides match
//   attr=v     the attribute has the value; attr!=v: it has not
//   v1,v2      any of the values (urgency=high,low)
//   *          every worker
// Attributes: urgency, resource_boundary, feature_category, has_external_dependencies
// (true/false), idempotent (true/false), tags (= any of the values is among the worker's tags;
// != none is), worker_name (the job class), name / queue_name (the worker's queue). Spaces
// around tokens are ignored. Values of urgency, resource_boundary and the booleans are checked
// when the query is parsed. A parsed selector is immutable and safe to share between threads.
#include <stdexcept>
#include <string>
#include <vector>

#include "kiqd/worker_metadata.hpp"

namespace kiqd {

// What a selector looks at for one worker (job class).
struct WorkerAttributes {
    const std::string& worker_name;
    const std::string& queue;
    const WorkerMetadata& metadata;
};

class WorkerSelector {
  public:
    // Throws std::invalid_argument with a message that names the bad part of `query`.
    static WorkerSelector parse(const std::string& query);
    bool matches(const WorkerAttributes& worker) const;
    const std::string& text() const { return text_; }

  private:
    struct Condition {
        bool any = false;  // '*'
        std::string attribute;
        bool negated = false;
        std::vector<std::string> values;
    };
    static bool holds(const Condition& c, const WorkerAttributes& w);
    std::string text_;
    std::vector<std::vector<Condition>> alternatives_;  // OR of ANDs
};

}  // namespace kiqd
