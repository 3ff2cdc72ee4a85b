// TlsStream: a rediss:// connection's socket, TLS session and reply parser (see tls_stream.hpp).
// Used by the one thread that owns its Connection.
#include "redis/tls_stream.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kiqd/redis/errors.hpp"

namespace kiqd::redis {
namespace {

using Clock = std::chrono::steady_clock;

// The socket BIO OpenSSL ships writes with write(2), which raises SIGPIPE when Redis has closed
// the connection; kiqd's command line ignores SIGPIPE, but a program built on the library may
// not. This BIO sends with MSG_NOSIGNAL instead and reports EAGAIN as "retry".
int bio_write(BIO* b, const char* data, int len) {
    const int fd = static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(b)));
    const ssize_t n = ::send(fd, data, static_cast<size_t>(len), MSG_NOSIGNAL);
    BIO_clear_retry_flags(b);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        BIO_set_retry_write(b);
    return static_cast<int>(n);
}

int bio_read(BIO* b, char* data, int len) {
    const int fd = static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(b)));
    const ssize_t n = ::recv(fd, data, static_cast<size_t>(len), 0);
    BIO_clear_retry_flags(b);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_read(b);
    return static_cast<int>(n);
}

long bio_ctrl(BIO*, int cmd, long, void*) {
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;  // nothing is buffered here
}

BIO_METHOD* socket_method() {
    static BIO_METHOD* method = [] {
        BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "kiqd socket");
        BIO_meth_set_write(m, bio_write);
        BIO_meth_set_read(m, bio_read);
        BIO_meth_set_ctrl(m, bio_ctrl);
        return m;
    }();
    return method;
}

int remaining_ms(Clock::time_point deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

// Waits for `events` on fd until `deadline`; false on timeout.
bool wait_for(int fd, short events, Clock::time_point deadline) {
    for (;;) {
        pollfd p{fd, events, 0};
        const int n = ::poll(&p, 1, remaining_ms(deadline));
        if (n > 0) return true;  // ready, or an error the next call reports
        if (n == 0) return false;
        if (errno != EINTR) return true;
    }
}

std::string openssl_error_text(unsigned long code) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof buf);
    return buf;
}

bool is_ip_literal(const std::string& host) {
    unsigned char buf[sizeof(in6_addr)];
    return ::inet_pton(AF_INET, host.c_str(), buf) == 1 ||
           ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

}  // namespace

TlsStream::TlsStream(const TlsContext& tls, const std::string& host, int port,
                     std::chrono::milliseconds connect_timeout,
                     std::chrono::milliseconds io_timeout, std::string where)
    : io_timeout_(io_timeout), where_(std::move(where)) {
    const auto deadline = Clock::now() + connect_timeout;
    try {
        connect_tcp(host, port, deadline);
        handshake(tls, host, deadline);
        reader_ = redisReaderCreate();
        if (!reader_) throw IoError("cannot allocate a Redis reply reader");
    } catch (...) {
        release();  // the destructor does not run for a constructor that throws
        throw;
    }
}

TlsStream::~TlsStream() {
    release();
}

void TlsStream::release() noexcept {
    if (ssl_) SSL_free(ssl_);  // frees the BIO too; no close_notify: the socket just closes
    if (fd_ >= 0) ::close(fd_);
    if (reader_) redisReaderFree(reader_);
    ssl_ = nullptr;
    fd_ = -1;
    reader_ = nullptr;
}

void TlsStream::connect_tcp(const std::string& host, int port, Clock::time_point deadline) {
    const std::string prefix = "cannot connect to Redis (" + where_ + "): ";
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const std::string service = std::to_string(port);
    if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0)
        throw IoError(prefix + ::gai_strerror(rc));
    std::string problem = "no address";
    bool timed_out = false;
    for (addrinfo* a = found; a; a = a->ai_next) {
        // Created close-on-exec: an exec'd child must never inherit a Redis connection.
        const int fd =
            ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            problem = std::strerror(errno);
            continue;
        }
        int err = 0;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            err = errno;
            if (err == EINPROGRESS) {
                if (!wait_for(fd, POLLOUT, deadline)) {
                    err = ETIMEDOUT;
                } else {
                    socklen_t len = sizeof err;
                    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
                }
            }
        }
        if (err != 0) {
            timed_out = err == ETIMEDOUT;
            problem = err == ETIMEDOUT ? "Connection timed out" : std::strerror(err);
            ::close(fd);
            continue;
        }
        fd_ = fd;
        break;
    }
    ::freeaddrinfo(found);
    if (fd_ < 0) {
        if (timed_out) throw TimeoutError(prefix + problem);
        throw IoError(prefix + problem);
    }
    // What hiredis does for its TCP connections: no Nagle delay on pipelined commands, and
    // keep-alive (15 s) so a peer that vanished without a FIN is noticed.
    int on = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    ::setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    int idle = REDIS_KEEPALIVE_INTERVAL, intvl = REDIS_KEEPALIVE_INTERVAL / 3, cnt = 3;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    ::setsockopt(fd_, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    ::setsockopt(fd_, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

void TlsStream::handshake(const TlsContext& tls, const std::string& host,
                          Clock::time_point deadline) {
    ssl_ = SSL_new(tls.native());
    BIO* bio = ssl_ ? BIO_new(socket_method()) : nullptr;
    if (!bio)
        throw IoError("cannot connect to Redis (" + where_ + "): cannot allocate a TLS session");
    BIO_set_data(bio, reinterpret_cast<void*>(static_cast<intptr_t>(fd_)));
    BIO_set_init(bio, 1);
    SSL_set_bio(ssl_, bio, bio);
    const auto& o = tls.options();
    const std::string& name = o.server_name.empty() ? host : o.server_name;
    if (!is_ip_literal(name)) SSL_set_tlsext_host_name(ssl_, name.c_str());  // SNI
    if (o.verify_peer) {
        // The certificate must name the server: a DNS name, or the address itself (IP SAN).
        const int ok = is_ip_literal(name)
                           ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), name.c_str())
                           : SSL_set1_host(ssl_, name.c_str());
        if (ok != 1)
            throw IoError("cannot connect to Redis (" + where_ + "): invalid TLS server name '" +
                          name + "'");
    }
    SSL_set_connect_state(ssl_);
    for (;;) {
        ERR_clear_error();
        const int ret = SSL_connect(ssl_);
        if (ret == 1) return;
        const int e = SSL_get_error(ssl_, ret);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            if (!wait_for(fd_, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline))
                throw TimeoutError(
                    "cannot connect to Redis (" + where_ +
                    "): TLS handshake timed out (is that a plaintext port? rediss:// needs a TLS "
                    "port)");
            continue;
        }
        const long verify = SSL_get_verify_result(ssl_);
        if (verify != X509_V_OK)
            throw IoError(
                "cannot connect to Redis (" + where_ +
                "): TLS certificate verification failed: " + X509_verify_cert_error_string(verify));
        fail_tls(e, "cannot connect to Redis: TLS handshake failed");
    }
}

void TlsStream::fail_tls(int ssl_error, const char* what) {
    const int saved_errno = errno;
    const unsigned long code = ERR_peek_error();
    ERR_clear_error();
    const std::string prefix = std::string(what) + " (" + where_ + "): ";
    if (ssl_error == SSL_ERROR_ZERO_RETURN || (ssl_error == SSL_ERROR_SYSCALL && code == 0 &&
                                               (saved_errno == 0 || saved_errno == ECONNRESET)))
        throw ClosedError(prefix + "Server closed the connection");
    if (ssl_error == SSL_ERROR_SYSCALL && code == 0)
        throw IoError(prefix + std::strerror(saved_errno));
    std::string reason = code ? openssl_error_text(code) : "TLS error " + std::to_string(ssl_error);
    // The usual sign of a plaintext Redis port behind a rediss:// URL: its "-ERR" reply to the
    // ClientHello is not a TLS record.
    if (code && ERR_GET_LIB(code) == ERR_LIB_SSL &&
        (ERR_GET_REASON(code) == SSL_R_WRONG_VERSION_NUMBER ||
         ERR_GET_REASON(code) == SSL_R_PACKET_LENGTH_TOO_LONG))
        reason += " (is that a plaintext port? rediss:// needs a TLS port)";
    throw IoError(prefix + reason);
}

void TlsStream::wait_or_throw(int ret, const char* what, Clock::time_point deadline) {
    const int e = SSL_get_error(ssl_, ret);
    if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) fail_tls(e, what);
    if (!wait_for(fd_, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline))
        throw TimeoutError(std::string(what) + " (" + where_ +
                           "): Resource temporarily unavailable");
}

void TlsStream::append(int argc, const char** argv, const size_t* lens) {
    char* cmd = nullptr;
    const int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
    if (len < 0) throw IoError("cannot format a Redis command (out of memory)");
    out_.append(cmd, static_cast<size_t>(len));
    redisFreeCommand(cmd);
}

void TlsStream::flush(const char* what) {
    size_t done = 0;
    auto deadline = Clock::now() + io_timeout_;
    while (done < out_.size()) {
        ERR_clear_error();
        const int n = SSL_write(ssl_, out_.data() + done, static_cast<int>(out_.size() - done));
        if (n > 0) {
            done += static_cast<size_t>(n);
            deadline = Clock::now() + io_timeout_;  // the timeout is per wait, as hiredis's
            continue;
        }
        wait_or_throw(n, what, deadline);
    }
    out_.clear();
}

redisReply* TlsStream::read_reply(const char* what) {
    if (!out_.empty()) flush(what);
    auto deadline = Clock::now() + io_timeout_;
    for (;;) {
        void* reply = nullptr;
        if (redisReaderGetReply(reader_, &reply) != REDIS_OK)
            throw ProtocolError(std::string(what) + " (" + where_ + "): " + reader_->errstr);
        if (reply) return static_cast<redisReply*>(reply);
        char buf[16 * 1024];
        ERR_clear_error();
        const int n = SSL_read(ssl_, buf, sizeof buf);
        if (n > 0) {
            if (redisReaderFeed(reader_, buf, static_cast<size_t>(n)) != REDIS_OK)
                throw ProtocolError(std::string(what) + " (" + where_ + "): " + reader_->errstr);
            deadline = Clock::now() + io_timeout_;
            continue;
        }
        wait_or_throw(n, what, deadline);
    }
}

}  // namespace kiqd::redis
