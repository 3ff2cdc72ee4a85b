#pragma once
// The runner protocol's wire format (docs/runner-protocol.md): frames of a 4-byte big-endian
// length and a body "TYPE\nDATA" (or "TYPE TAG\nDATA" in the tagged dialect, where one process
// runs several jobs at once), and the meaning of the runner's replies. Pure functions and a
// per-connection decoder; whichever thread reads a runner's socket at the moment uses them.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiqd::runner {

// A body longer than this is a malformed frame (both ways).
constexpr size_t kMaxFrameBytes = 64u * 1024 * 1024;

struct Frame {
    std::string type;
    std::string data;
    uint32_t tag = 0;  // the tagged dialect's tag; 0: an untagged frame
};

// The bytes of one frame: length, type (and " TAG" when tag is not 0), '\n', data (any bytes,
// unchanged).
std::string encode_frame(std::string_view type, std::string_view data, uint32_t tag = 0);

// Splits a byte stream into frames. feed() what was read, then take frames with next() until it
// returns nothing. Once malformed, it stays so (the stream cannot be resynchronised).
class FrameReader {
  public:
    void feed(const char* data, size_t n) { buf_.append(data, n); }
    // The next complete frame; nullopt when more bytes are needed or the stream is malformed.
    std::optional<Frame> next();
    bool malformed() const { return !error_.empty(); }
    const std::string& error() const { return error_; }
    // Bytes received but not yet a complete frame.
    size_t pending() const { return buf_.size() - pos_; }

  private:
    std::string buf_;
    size_t pos_ = 0;
    std::string error_;
};

// What a failed job's class asked for instead of a retry (Sidekiq 7's sidekiq_retry_in returning
// :kill or :discard).
enum class GiveUp { no, kill, discard };

// What a runner that ran Sidekiq's own JobRetry decided for a failed job: none (kiqd decides),
// retry (at retry_at), dead (the morgue) or discard (nothing to write). For retry and dead the
// runner waits for `written` before it runs what Sidekiq runs after that write, then answers
// `done`.
enum class Decision { none, retry, dead, discard };

// A `done`, `fail` or `throttled` answer to a job.
struct Reply {
    bool ok = false;
    // `throttled`: the app's throttling (sidekiq-throttled) did not admit the job, and the
    // runner handed it back as the gem does; nothing ran. `rest_seconds` > 0: leave its queue
    // out of the fetch that long (the gem's cooldown).
    bool throttled = false;
    double rest_seconds = 0;
    std::string error_class;  // fail only
    std::string message;
    std::vector<std::string> backtrace;
    std::optional<long long> retry_in;  // seconds, > 0
    GiveUp give_up = GiveUp::no;        // "retry_in": "kill" | "discard"
    Decision decision = Decision::none;
    double retry_at = 0;  // decision retry: when (epoch seconds, the retry set's score)
    // The runner holds the job's seat until kiqd says the failure is written.
    bool awaits_written() const {
        return decision == Decision::retry || decision == Decision::dead;
    }
};

// The reply a frame carries, or nullopt with `error` saying why it is not one.
std::optional<Reply> parse_reply(const Frame& frame, std::string& error);

// Server settings the application made in its own Sidekiq configuration (configure_server), as a
// runner reports them in `ready` ("app"): only those that differ from Sidekiq's defaults.
// A capsule the app defines in Ruby (`config.capsule(NAME)`, Sidekiq 7 and later): its queues in
// the capsule's order, each with its weight (0: none given, Sidekiq's strict order).
struct AppCapsule {
    std::string name;
    long long concurrency = 0;
    std::vector<std::pair<std::string, long long>> queues;
};
// A job class the app has loaded at boot: its `sidekiq_options` queue ("" when it is Sidekiq's
// default) and the worker attributes GitLab's WorkerAttributes methods answer, as text (checked
// when kiqd takes them, server/app_settings.cpp). `attributes` empty: the class has none.
struct AppWorkerClass {
    std::string name;
    std::string queue;
    std::map<std::string, std::string> attributes;  // urgency, resource_boundary, feature_category
    std::optional<bool> idempotent, external_dependencies;
    std::optional<std::vector<std::string>> tags;
    bool has_metadata() const {
        return !attributes.empty() || idempotent || external_dependencies || tags;
    }
};
// A gem of the app that acts in Sidekiq's fetch: its fetch class, or a module prepended to
// BasicFetch, Manager or Processor. `honoured`: the runner does what it does (sidekiq-throttled's
// admission check); otherwise kiqd never runs that code, and says so.
struct AppFetchPatch {
    std::string target, module, gem;
    bool honoured = false;
};
struct AppSettings {
    std::optional<long long> max_retries;
    std::optional<long long> dead_max_jobs;
    std::optional<long long> dead_timeout_seconds;
    std::vector<AppCapsule> capsules;          // "capsules": [{name, concurrency, queues}]
    std::vector<AppWorkerClass> classes;       // "classes": [{class, queue, urgency, ...}]
    std::vector<AppFetchPatch> fetch_patches;  // "fetch_patches": [{target, module, gem, honoured}]
    bool empty() const {
        return !max_retries && !dead_max_jobs && !dead_timeout_seconds && capsules.empty() &&
               classes.empty() && fetch_patches.empty();
    }
};

// The `ready` greeting: the runner's pid and description, or nullopt with `error`.
struct Ready {
    AppSettings app;  // "app": {"max_retries": N, ..., "capsules": [...], "classes": [...]}
    long long pid = 0;
    std::string runner;
    bool preload = false;  // "preload": true: a master that forks the processes on request
    int threads = 0;       // "threads": N (1..1024): speaks the tagged dialect; 0: untagged
    // "seats": true: takes a socket per seat (a `seats` frame carrying them), each job and its
    // answer on its own seat's socket, read by the runner thread that serves that seat.
    bool seat_sockets = false;
};
std::optional<Ready> parse_ready(const Frame& frame, std::string& error);

}  // namespace kiqd::runner
