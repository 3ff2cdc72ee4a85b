#pragma once
// HandlerRegistry: job class name → the code that runs it, and optionally the class's worker
// metadata and queue (worker_metadata.hpp), declared in C++. Filled before the processors start
// (built-ins, C++ registrations, later plugins and exec handlers), then only read — concurrently
// and without locks — by every processor thread.
#include <functional>
#include <string>
#include <unordered_map>

#include "kiqd/job_context.hpp"
#include "kiqd/worker_metadata.hpp"

namespace kiqd {

// A handler runs one job. Return normally for success; throw to fail the job (JobError picks
// the error_class; any other exception reports its type). Handlers run on many threads at once
// and must be thread-safe.
using Handler = std::function<void(const Job& job, JobContext& ctx)>;

class HandlerRegistry {
  public:
    // Registers (or replaces) the handler for a class name, e.g. "HardWorker" or
    // "Admin::ReportJob". For ActiveJob payloads, register the job class ("wrapped").
    void add(std::string job_class, Handler handler);
    // The same, declaring the class's metadata and (optionally) the queue its jobs use, e.g.
    //   WorkerMetadata md; md.urgency = Urgency::high; md.resource_boundary =
    //   ResourceBoundary::cpu; registry.add("Search::Index", handler, md, "search");
    // Validated at startup (exit 78). A `handlers:` entry in the YAML with metadata keys replaces
    // the C++ metadata of that class as a whole; its `queue:` wins over the C++ queue.
    void add(std::string job_class, Handler handler, WorkerMetadata metadata,
             std::string queue = {});
    struct Declaration {
        WorkerMetadata metadata;
        std::string queue;  // "" = not declared
    };
    // The class's handler, else the one registered as "*" (every other class), else nullptr.
    const Handler* find(const std::string& job_class) const;
    // Whether the class has a handler of its own (not the "*" fallback).
    bool has(const std::string& job_class) const { return handlers_.count(job_class) > 0; }
    const Declaration* declaration(const std::string& job_class) const;  // nullptr: none
    const std::unordered_map<std::string, Declaration>& declarations() const {
        return declarations_;
    }
    size_t size() const { return handlers_.size(); }

  private:
    std::unordered_map<std::string, Handler> handlers_;
    std::unordered_map<std::string, Declaration> declarations_;
};

// Kiqd::Noop, Kiqd::Sleep (args[0] seconds; wakes on hard shutdown) and Kiqd::Fail
// (fails with args[0] as the message). Always registered.
void register_builtin_handlers(HandlerRegistry& registry);

}  // namespace kiqd
