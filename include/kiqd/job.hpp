#pragma once
// Job: one Sidekiq job as fetched from Redis. `raw` is the payload string exactly as it was in
// the queue — it is what kiqd pushes back on requeue and what the busy hash shows. parse_job
// checks it in one pass that builds no JSON tree and keeps the few fields every job needs
// (class, wrapped, jid, enqueued_at, retry_count, display_class); payload(), the parsed tree
// that handlers read args from, is built on first use, so a job whose handler and middleware
// never ask for it costs no tree (a no-op drain spent ~15 % of kiqd's CPU building and freeing
// them). Built on the processor thread that fetched it and never shared with another thread
// while it runs.
//
// A tree costs many times the text (a 16 MiB payload of `[{},{},...]` args: ~45 times), so
// kiqd's own middleware and retry path never build it: they read members with member_json()
// and member(), from where parse_job's scan found them, and parse only the members they use
// (docs/hardening-bounds.md#payload-memory). A handler that calls payload() or args() pays for
// the tree of what it asked for.
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
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
    // The raw JSON text of a top-level member's value, a view into `raw` (of duplicate keys the
    // last, as in payload()), or nullopt when absent. Builds no tree: parse_job noted where the
    // members kiqd reads are; any other key costs one pass over the top level of `raw`.
    std::optional<std::string_view> member_json(std::string_view key) const;
    // A member parsed on its own, or nullopt when absent: for option fields, which are small.
    std::optional<nlohmann::json> member(std::string_view key) const;
    // An object of the named members that are present, each parsed on its own.
    nlohmann::json members(std::initializer_list<std::string_view> keys) const;
    // The raw JSON text of args[i] (nullopt when there is no such argument); the arguments
    // before it are skipped unread.
    std::optional<std::string_view> arg_json(size_t i) const;
    // retry_count, absent before the first failure.
    std::optional<long long> retry_count() const { return retry_count_; }
    // Class name to show in logs (display_class, else wrapped, else class), as the Web UI does.
    const std::string& display_class() const {
        return display_class_.empty() ? handler_name() : display_class_;
    }
    // enqueued_at in epoch seconds, whatever the producer's unit.
    std::optional<double> enqueued_at() const { return enqueued_at_; }

    // How many members member_json finds without a pass over the payload.
    static constexpr size_t kIndexedMembers = 29;

  private:
    friend std::variant<Job, InvalidJob> parse_job(std::string, std::string, const JobLimits&);
    friend class JobFieldReader;
    friend class ScannedMembers;

    // Where a member's value is in `raw`; size 0 (no JSON value is empty): not in the payload.
    struct MemberSpan {
        std::uint32_t offset = 0;
        std::uint32_t size = 0;
    };
    void note_member(std::string_view key, size_t offset, size_t size) const;
    void index_members() const;  // for a Job whose members parse_job did not note

    std::optional<long long> retry_count_;
    std::optional<double> enqueued_at_;
    std::string display_class_;
    mutable std::optional<nlohmann::json> payload_;  // built by payload() on first use
    // The indexed members' places (job.cpp lists them): noted by parse_job's scan, or on first
    // use by member_json.
    mutable std::array<MemberSpan, kIndexedMembers> member_index_{};
    mutable bool indexed_ = false;
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
