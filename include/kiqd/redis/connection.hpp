#pragma once
// One synchronous Redis connection (hiredis), owned by exactly one thread at a time.
// It connects lazily, runs AUTH/SELECT after every (re)connect, and after an I/O error
// drops the socket so that the next command reconnects: callers never see a half-dead
// connection, only typed errors (redis/errors.hpp). On READONLY / NOREPLICAS / UNBLOCKED
// it reconnects and retries the command once, which follows a fail-over (Sidekiq does the same).
// A reply of an unexpected type (ProtocolError from ReplyRef) also costs the socket: the next
// command reconnects rather than read replies that may belong to other commands.
// With Sentinel (ConnectionOptions::sentinel), every connect asks the sentinels in turn for the
// master, connects to it and checks with ROLE that it is a master, so a reconnect after a
// fail-over finds the promoted replica.
// A rediss:// endpoint (Endpoint::tls) goes through a TlsStream (src/redis/tls_stream.hpp):
// kiqd's own socket with an OpenSSL session, and hiredis only formatting commands and parsing
// replies. A plain endpoint stays on hiredis's own redisContext, untouched by TLS.
#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiqd/redis/endpoint.hpp"
#include "kiqd/redis/errors.hpp"
#include "kiqd/redis/sentinel.hpp"
#include "kiqd/redis/tls.hpp"

namespace kiqd::redis {

class TlsStream;

// Shared by a connection and the replies read from it. A reply of another type or shape than its
// reader expects means that replies and commands may no longer match up (an extra reply on the
// wire puts every later reply one command late), so the connection drops its socket before its
// next command instead of reading on.
struct ReplyStreamState {
    std::atomic<bool> out_of_step{false};
};

// A non-owning view of a (possibly nested) reply.
class ReplyRef {
  public:
    explicit ReplyRef(const redisReply* r, ReplyStreamState* stream = nullptr)
        : r_(r), stream_(stream) {}
    bool is_nil() const { return r_->type == REDIS_REPLY_NIL; }
    bool is_array() const { return r_->type == REDIS_REPLY_ARRAY; }
    bool is_string() const {
        return r_->type == REDIS_REPLY_STRING || r_->type == REDIS_REPLY_STATUS;
    }
    bool is_integer() const { return r_->type == REDIS_REPLY_INTEGER; }
    bool is_error() const { return r_->type == REDIS_REPLY_ERROR; }
    std::string_view error_text() const { return {r_->str, r_->len}; }  // when is_error()
    // Throw ProtocolError when the reply has another type than asked for (and mark the
    // connection it came from for a reconnect).
    std::string_view str() const;
    long long integer() const;
    size_t size() const;  // array length (0 for nil)
    ReplyRef operator[](size_t i) const;
    std::optional<std::string> optional_str() const;  // nil → nullopt
    // For a reply whose shape the caller finds wrong (a script's reply of the wrong length):
    // throws ProtocolError(what) and marks the connection for a reconnect, as the accessors do.
    [[noreturn]] void unexpected(const std::string& what) const;

  private:
    const redisReply* r_;
    ReplyStreamState* stream_;  // kept alive by the owning Reply; null when not from a connection
};

// Owns a top-level reply.
class Reply : public ReplyRef {
  public:
    explicit Reply(redisReply* r, std::shared_ptr<ReplyStreamState> stream = nullptr)
        : ReplyRef(r, stream.get()), owner_(r), stream_(std::move(stream)) {}

  private:
    struct Free {
        void operator()(redisReply* r) const { freeReplyObject(r); }
    };
    std::unique_ptr<redisReply, Free> owner_;
    std::shared_ptr<ReplyStreamState> stream_;
};

using Command = std::vector<std::string>;

struct ConnectionOptions {
    Endpoint endpoint;
    std::chrono::milliseconds connect_timeout{1000};
    // Must exceed the timeout of any blocking command sent on this connection (BRPOP: 2 s).
    std::chrono::milliseconds socket_timeout{5000};
    std::string client_name;  // CLIENT SETNAME after connect, when not empty
    // When enabled, host/port of `endpoint` are ignored: the sentinels name the master; db,
    // username and password still come from `endpoint`.
    SentinelOptions sentinel;
    // The TLS settings for a rediss:// endpoint (and for the master a sentinel names when the
    // endpoint is rediss://). Null with rediss://: the system's CAs, peer verification on.
    std::shared_ptr<const TlsContext> tls;

    // For log lines: the endpoint, or the master name and sentinels; never credentials.
    std::string describe() const;
};

class Connection {
  public:
    explicit Connection(ConnectionOptions options);
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;
    ~Connection();

    Reply command(std::initializer_list<std::string_view> argv);
    Reply command(const std::vector<std::string_view>& argv);
    Reply command(const Command& argv);

    // Sends all commands in one write and reads all replies. If any reply is an error, every
    // reply is still read (the connection stays in sync) and the first error is thrown.
    std::vector<Reply> pipeline(const std::vector<Command>& commands);
    // The same, but error replies come back as replies (ReplyRef::is_error) instead of being
    // thrown, so that one command's error never costs the caller another command's reply (a
    // popped job). Throws only when the connection fails.
    std::vector<Reply> pipeline_unchecked(const std::vector<Command>& commands);

    // Connects now (normally lazy). Throws IoError when the server cannot be reached.
    void connect();
    void disconnect() noexcept;
    bool connected() const { return ctx_ != nullptr || tls_ != nullptr; }
    const ConnectionOptions& options() const { return options_; }
    // The server of the current (or last attempted) connection: with Sentinel, the master found.
    const Endpoint& endpoint() const { return current_; }

  private:
    Reply run(int argc, const char** argv, const size_t* lens);
    Reply run_once(int argc, const char** argv, const size_t* lens);
    [[noreturn]] void fail_context(const char* what);
    void open(const Endpoint& ep);  // connect + AUTH/SELECT/SETNAME to exactly this server
    void connect_via_sentinel();
    bool is_master();          // ROLE says master (or ROLE is not allowed for this ACL user)
    void connect_if_needed();  // connects, or reconnects when a reply showed the stream astray
    [[noreturn]] void auth_failed(const std::string& reply);
    // The TLS path of one command or pipeline: queue, send, read; drops the stream on a throw.
    redisReply* tls_exchange(int argc, const char** argv, const size_t* lens, const char* what);
    std::vector<Reply> tls_pipeline(const std::vector<Command>& commands);

    ConnectionOptions options_;
    Endpoint current_;
    size_t preferred_sentinel_ = 0;   // the sentinel that answered last: asked first next time
    redisContext* ctx_ = nullptr;     // plain TCP or Unix socket (hiredis does the I/O)
    std::unique_ptr<TlsStream> tls_;  // rediss:// (never both set)
    std::shared_ptr<ReplyStreamState> stream_;  // one per socket: a new socket starts in step
    bool ever_connected_ = false;  // a later connect() is a reconnect (outcome_counters)
};

// True for the reply errors after which Sidekiq reconnects and retries (fail-over in progress).
bool is_failover_error(const ReplyError& e);

}  // namespace kiqd::redis
