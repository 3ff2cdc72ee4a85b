#pragma once
// RedisServer: a private redis-server on a free loopback port, started by the test and stopped
// (by its PID) when the object goes away. Non-persistent unless `extra_args` say otherwise
// (e.g. {"--appendonly", "yes"}); it runs in its own temporary directory, so AOF/RDB files and
// replica state stay private. Also used to simulate outages (stop()/start() keep the port and
// the directory; kill9() is a crash). shared() is one server per test binary; call flushall() at
// the start of each test. With "--requirepass PW" among `extra_args`, options()/connect() (and so
// the readiness check and flushall()) authenticate with PW; url() never contains it.
// With a TlsMode the server speaks TLS only (certificates from TestCerts::shared()): url() is
// rediss://, options() carries a client context, and kiqd_config() adds the `tls:` keys.
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "kiqd/redis/connection.hpp"
#include "support/temp_dir.hpp"

namespace kiqd::test {

struct TlsMode {
    std::string leaf = "server";  // the server's certificate: server, wrong-name, expired
    bool auth_clients = false;    // require a client certificate (mutual TLS)
};

class RedisServer {
  public:
    // `extra_args` are appended to the redis-server command line (they win over the defaults).
    explicit RedisServer(std::vector<std::string> extra_args = {});
    RedisServer(std::vector<std::string> extra_args, TlsMode tls);
    ~RedisServer();
    RedisServer(const RedisServer&) = delete;
    RedisServer& operator=(const RedisServer&) = delete;

    void start();
    void stop();   // SIGTERM, then waits for the exit
    void kill9();  // SIGKILL, then waits for the exit: a crash
    int port() const { return port_; }
    pid_t pid() const { return pid_; }
    const std::string& dir() const { return dir_.path(); }
    std::string url() const {
        return (tls_ ? "rediss://127.0.0.1:" : "redis://127.0.0.1:") + std::to_string(port_) + "/0";
    }
    bool tls() const { return tls_ != nullptr; }
    // `, tls: {...}` for a kiqd config's redis: map (empty without TLS).
    const std::string& tls_yaml() const { return tls_yaml_; }
    const std::string& password() const { return password_; }  // from --requirepass, or ""
    redis::ConnectionOptions options() const;
    redis::Connection connect() const { return redis::Connection(options()); }
    void flushall() const;

    static RedisServer& shared();

  private:
    void wait_exit();

    int port_;
    std::vector<std::string> extra_args_;
    TempDir dir_{"kiqd-redis"};
    std::string password_;
    std::shared_ptr<const redis::TlsContext> tls_;  // the client side, when the server is TLS
    std::string tls_yaml_;
    pid_t pid_ = -1;
};

int free_port();

// Waits for the redis-server `pid` (a child of this process) to answer at `options` (INFO's
// process_id is `pid`: a server that took the port first does not count). It
// gives a loaded machine a minute, and gives up early if the child exits. On failure the child is
// killed and reaped, and the error names its fate: "" when it answers.
std::string await_started(pid_t pid, const redis::ConnectionOptions& options);

// A kiqd YAML config pointing at `server`, with a fast scheduler poll, followed by `extra`.
std::string kiqd_config(const RedisServer& server, const std::string& extra);
// The same, serving only the `default` queue.
std::string default_queue_config(const RedisServer& server, const std::string& extra);

}  // namespace kiqd::test
