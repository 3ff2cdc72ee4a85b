#pragma once
// Job: one Sidekiq job as fetched from Redis. `raw` is the payload string exactly as it was in
// the queue — it is what kiqd pushes back on requeue and what the busy hash shows. parse_job
// checks it in one pass that builds no JSON tree and keeps the few fields every job needs
// (class, wrapped, jid, enqueued_at, retry_count, display_class); payload(), the parsed tree
// that handlers read args from, is built on first use, so a job whose handler and middleware
// never ask for it costs no tree (a no-op drain spent ~15 % of kiqd's CPU building and freeing
// them). Built on the processor thread that fetched it and never shared with another thread
// while it runs.
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>

namespace kiqd {

struct InvalidJob;
struct JobLimits;

struct Job {
    std::string raw;        // the original JSON string, never modified
    std::string queue;      // the queue it was fetched from (no "queue:" prefix)
    std::string job_class;  // "class"
    std::string wrapped;    // "wrapped" (ActiveJob), empty when absent
    std::string jid;        // "jid" (empty when the producer left it out)

    // The parsed, read-only payload (an empty object for a Job not made by parse_job).
    const nlohmann::json& payload() const;
    // The class name handlers are registered under: "wrapped" for ActiveJob payloads.
    const std::string& handler_name() const { return wrapped.empty() ? job_class : wrapped; }
    // args (an empty array when absent). For ActiveJob, the job's own arguments are in
    // args[0]["arguments"]; see active_job_arguments().
    const nlohmann::json& args() const;
    const nlohmann::json* active_job_arguments() const;
    // retry_count, absent before the first failure.
    std::optional<long long> retry_count() const { return retry_count_; }
    // Class name to show in logs (display_class, else wrapped, else class), as the Web UI does.
    const std::string& display_class() const {
        return display_class_.empty() ? handler_name() : display_class_;
    }
    // enqueued_at in epoch seconds, whatever the producer's unit.
    std::optional<double> enqueued_at() const { return enqueued_at_; }

  private:
    friend std::variant<Job, InvalidJob> parse_job(std::string, std::string, const JobLimits&);
    friend class JobFieldReader;

    std::optional<long long> retry_count_;
    std::optional<double> enqueued_at_;
    std::string display_class_;
    mutable std::optional<nlohmann::json> payload_;  // built by payload() on first use
};

// Why a payload cannot be run. It goes to the dead set with this reason.
struct InvalidJob {
    std::string error_class;  // "JSON::ParserError", "Kiqd::InvalidJob", "Kiqd::PayloadTooLarge"
    std::string error_message;
};

struct JobLimits {
    size_t max_payload_bytes = 16 * 1024 * 1024;
    size_t max_nesting_depth = 256;
};

std::variant<Job, InvalidJob> parse_job(std::string raw, std::string queue,
                                        const JobLimits& limits = {});

}  // namespace kiqd
