#pragma once
// A Lua script run with EVALSHA. The SHA1 is learnt from the first SCRIPT LOAD and shared by
// every thread; on NOSCRIPT (a restarted or failed-over Redis has an empty script cache) the
// script is loaded again and the call retried once, as Sidekiq's scheduler does.
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "kiqd/redis/connection.hpp"

namespace kiqd::redis {

// Sends again, as EVAL with the script's source, every EVALSHA among sent[begin, end) that
// Redis answered NOSCRIPT in `replies` (its script cache was flushed, so they did not run);
// one more round trip, only then. Throws redis::Error when that write fails.
void resend_noscript(Connection& conn, const std::vector<Command>& sent,
                     const std::vector<Reply>& replies, size_t begin, size_t end);

class Script {
  public:
    explicit Script(std::string source) : source_(std::move(source)) {}
    Reply run(Connection& conn, const std::vector<std::string>& keys,
              const std::vector<std::string>& args) const;
    // run() with views: hiredis formats the command from them, nothing is copied first (a
    // batched refill's script call has hundreds of arguments). They must outlive the call.
    Reply run_views(Connection& conn, const std::vector<std::string_view>& keys,
                    const std::vector<std::string_view>& args) const;
    // The EVALSHA command, for pipelining; callers that pipeline must call load() first. The
    // rvalue form moves the arguments in instead of copying them.
    Command evalsha_command(const std::vector<std::string>& keys,
                            const std::vector<std::string>& args) const;
    Command evalsha_command(std::vector<std::string>&& keys, std::vector<std::string>&& args) const;
    // run() with `pending` (idempotent commands left over from the previous job: lock releases)
    // sent first in the same write, their replies unchecked; `pending` is cleared once sent
    // and kept when the connection fails. Null or empty `pending`: run().
    Reply run_after(Connection& conn, std::vector<Command>* pending,
                    const std::vector<std::string>& keys,
                    const std::vector<std::string>& args) const;
    std::string load(Connection& conn) const;  // SCRIPT LOAD; returns the SHA1
    // An EVALSHA for a pipeline whose replies nobody reads (JobContext::after_job: lock
    // releases), loading the script first the first time; senders of such commands pass their
    // replies to resend_noscript, so a flushed script cache loses none of them. Never throws:
    // when the load fails it returns an EVAL with the source.
    // Takes its arguments by value: a caller's temporaries are moved in, not copied.
    Command deferred_command(Connection& conn, std::vector<std::string> keys,
                             std::vector<std::string> args) const;
    // Sends `calls` (this script's evalsha_command()s) in one pipeline, replies unchecked (an
    // error stays in its reply). Loads the script first if this process never has; the calls
    // Redis answers NOSCRIPT (its cache was flushed: they did not run) are sent again, once,
    // in one more pipeline after one SCRIPT LOAD.
    std::vector<Reply> pipeline_unchecked(Connection& conn, std::vector<Command> calls) const;
    // The SHA1 learnt from SCRIPT LOAD; "" until this process has loaded the script.
    std::string sha() const;

  private:
    std::string source_;
    mutable std::mutex mutex_;
    mutable std::string sha_;  // guarded by mutex_
};

}  // namespace kiqd::redis
