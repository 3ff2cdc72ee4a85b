#pragma once
// A Lua script run with EVALSHA. The SHA1 is learnt from the first SCRIPT LOAD and shared by
// every thread; on NOSCRIPT (a restarted or failed-over Redis has an empty script cache) the
// script is loaded again and the call retried once, as Sidekiq's scheduler does.
#include <mutex>
#include <string>
#include <vector>

#include "kiqd/redis/connection.hpp"

namespace kiqd::redis {

class Script {
  public:
    explicit Script(std::string source) : source_(std::move(source)) {}
    Reply run(Connection& conn, const std::vector<std::string>& keys,
              const std::vector<std::string>& args) const;
    // The EVALSHA command, for pipelining; callers that pipeline must call load() first.
    Command evalsha_command(const std::vector<std::string>& keys,
                            const std::vector<std::string>& args) const;
    std::string load(Connection& conn) const;  // SCRIPT LOAD; returns the SHA1
    // Sends `calls` (this script's evalsha_command()s) in one pipeline, replies unchecked (an
    // error stays in its reply). Loads the script first if this process never has; the calls
    // Redis answers NOSCRIPT (its cache was flushed: they did not run) are sent again, once,
    // in one more pipeline after one SCRIPT LOAD.
    std::vector<Reply> pipeline_unchecked(Connection& conn, std::vector<Command> calls) const;

  private:
    std::string sha() const;
    std::string source_;
    mutable std::mutex mutex_;
    mutable std::string sha_;  // guarded by mutex_
};

}  // namespace kiqd::redis
