#pragma once
// HandlerRegistry: job class name → the code that runs it. Filled before the processors start
// (built-ins, C++ registrations, later plugins and exec handlers), then only read — concurrently
// and without locks — by every processor thread.
#include <functional>
#include <string>
#include <unordered_map>

#include "kiqd/job_context.hpp"

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
    const Handler* find(const std::string& job_class) const;  // nullptr when unknown
    size_t size() const { return handlers_.size(); }

  private:
    std::unordered_map<std::string, Handler> handlers_;
};

// Kiqd::Noop, Kiqd::Sleep (args[0] seconds; wakes on hard shutdown) and Kiqd::Fail
// (fails with args[0] as the message). Always registered.
void register_builtin_handlers(HandlerRegistry& registry);

}  // namespace kiqd
