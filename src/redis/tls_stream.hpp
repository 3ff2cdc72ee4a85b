#pragma once
// TlsStream: one rediss:// connection's transport. It opens the TCP socket itself (non-blocking,
// close-on-exec, TCP_NODELAY and keep-alive as hiredis sets them), runs the TLS handshake with
// OpenSSL, and then moves Redis commands and replies over SSL_write/SSL_read. hiredis still
// formats the commands (redisFormatCommandArgv) and parses the replies (a redisReader fed with
// the decrypted bytes), so replies are the same redisReply trees as on the plain path.
// Owned by one Connection, so by one thread at a time. Every failure throws a typed error
// (redis/errors.hpp) whose message names the endpoint and the reason; after a throw the stream
// is unusable and its Connection drops it.
#include <hiredis/hiredis.h>

#include <chrono>
#include <string>

#include "kiqd/redis/tls.hpp"

struct ssl_st;

namespace kiqd::redis {

class TlsStream {
  public:
    // Connects to host:port and completes the handshake within `connect_timeout`; later reads
    // and writes each wait at most `io_timeout`. `where` names the endpoint in messages.
    TlsStream(const TlsContext& tls, const std::string& host, int port,
              std::chrono::milliseconds connect_timeout, std::chrono::milliseconds io_timeout,
              std::string where);
    ~TlsStream();
    TlsStream(const TlsStream&) = delete;
    TlsStream& operator=(const TlsStream&) = delete;

    // Queues one command; nothing is sent before read_reply.
    void append(int argc, const char** argv, const size_t* lens);
    // Sends what is queued, then reads one reply (the caller frees it). `what` starts the
    // message of an error ("Redis command failed").
    redisReply* read_reply(const char* what);

  private:
    void connect_tcp(const std::string& host, int port,
                     std::chrono::steady_clock::time_point deadline);
    void handshake(const TlsContext& tls, const std::string& host,
                   std::chrono::steady_clock::time_point deadline);
    void flush(const char* what);
    // After an SSL call returned `ret` <= 0: waits until the socket is ready for what OpenSSL
    // needs (until `deadline`), or throws the error it reports.
    void wait_or_throw(int ret, const char* what, std::chrono::steady_clock::time_point deadline);
    [[noreturn]] void fail_tls(int ssl_error, const char* what);
    void release() noexcept;

    int fd_ = -1;
    ssl_st* ssl_ = nullptr;
    redisReader* reader_ = nullptr;
    std::string out_;  // formatted commands not yet written
    std::chrono::milliseconds io_timeout_;
    std::string where_;
};

}  // namespace kiqd::redis
