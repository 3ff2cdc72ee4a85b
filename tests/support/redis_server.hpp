#pragma once
// RedisServer: a private, non-persistent redis-server on a free loopback port, started by the
// test and stopped (by its PID) when the object goes away. Also used to simulate outages
// (stop()/start() keep the port). shared() is one server per test binary; call flushall() at the
// start of each test. wait_until() polls a predicate with a deadline instead of sleeping.
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>

#include "kiqd/redis/connection.hpp"

namespace kiqd::test {

class RedisServer {
  public:
    RedisServer();
    ~RedisServer();
    RedisServer(const RedisServer&) = delete;
    RedisServer& operator=(const RedisServer&) = delete;

    void start();
    void stop();
    int port() const { return port_; }
    std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_) + "/0"; }
    redis::ConnectionOptions options() const;
    redis::Connection connect() const { return redis::Connection(options()); }
    void flushall() const;

    static RedisServer& shared();

  private:
    int port_;
    pid_t pid_ = -1;
};

int free_port();

// A kiqd YAML config pointing at `server`, with a fast scheduler poll, followed by `extra`.
std::string kiqd_config(const RedisServer& server, const std::string& extra);

// Polls `pred` every 10 ms until it is true or `timeout` passes; returns its last value.
bool wait_until(const std::function<bool()>& pred,
                std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace kiqd::test
