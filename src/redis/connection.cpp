#include "kiqd/redis/connection.hpp"

#include <fcntl.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "common/outcome_counters.hpp"
#include "redis/tls_stream.hpp"

namespace kiqd::redis {
namespace {

// For a rediss:// endpoint given without TLS settings (a test, a program on the library):
// the system's CAs, peer verification on, built once.
const TlsContext& default_tls_context() {
    static const std::shared_ptr<const TlsContext> context = TlsContext::create(TlsOptions{});
    return *context;
}

// One command's arguments as the pointer and length arrays hiredis takes.
struct ArgvView {
    explicit ArgvView(const Command& cmd) {
        ptrs.reserve(cmd.size());
        lens.reserve(cmd.size());
        for (const auto& a : cmd) {
            ptrs.push_back(a.data());
            lens.push_back(a.size());
        }
    }
    int argc() const { return static_cast<int>(ptrs.size()); }
    std::vector<const char*> ptrs;
    std::vector<size_t> lens;
};

// The same error class with `hint` appended to the message.
[[noreturn]] void rethrow_with_hint(const IoError& e, const std::string& hint) {
    const std::string msg = std::string(e.what()) + hint;
    if (dynamic_cast<const ClosedError*>(&e)) throw ClosedError(msg);
    throw IoError(msg);
}

timeval to_timeval(std::chrono::milliseconds ms) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
    return tv;
}

}  // namespace

void ReplyRef::unexpected(const std::string& what) const {
    if (stream_) stream_->out_of_step = true;
    throw ProtocolError(what);
}

std::string_view ReplyRef::str() const {
    if (r_->type == REDIS_REPLY_STRING || r_->type == REDIS_REPLY_STATUS) return {r_->str, r_->len};
    unexpected("expected a string reply, got type " + std::to_string(r_->type));
}

long long ReplyRef::integer() const {
    if (r_->type == REDIS_REPLY_INTEGER) return r_->integer;
    unexpected("expected an integer reply, got type " + std::to_string(r_->type));
}

size_t ReplyRef::size() const {
    if (r_->type == REDIS_REPLY_NIL) return 0;
    if (r_->type != REDIS_REPLY_ARRAY)
        unexpected("expected an array reply, got type " + std::to_string(r_->type));
    return r_->elements;
}

ReplyRef ReplyRef::operator[](size_t i) const {
    if (i >= size()) unexpected("reply array index out of range");
    return ReplyRef(r_->element[i], stream_);
}

std::optional<std::string> ReplyRef::optional_str() const {
    if (is_nil()) return std::nullopt;
    return std::string(str());
}

bool is_failover_error(const ReplyError& e) {
    return e.starts_with("READONLY") || e.starts_with("NOREPLICAS") || e.starts_with("UNBLOCKED");
}

std::string ConnectionOptions::describe() const {
    if (!sentinel.enabled()) return endpoint.describe();
    return sentinel.describe() + ", db " + std::to_string(endpoint.db);
}

Connection::Connection(ConnectionOptions options)
    : options_(std::move(options)), current_(options_.endpoint) {}

Connection::~Connection() {
    disconnect();
}

void Connection::disconnect() noexcept {
    if (ctx_) redisFree(ctx_);
    ctx_ = nullptr;
    tls_.reset();
    stream_.reset();
}

void Connection::connect_if_needed() {
    if (connected() && (!stream_ || stream_->out_of_step)) disconnect();
    if (connected()) return;
    connect();
    // A connection that had been open before is a reconnect (after an error or an outage).
    if (ever_connected_) increment(outcome_counters().redis_reconnects);
    ever_connected_ = true;
}

void Connection::fail_context(const char* what) {
    const int err = ctx_ ? ctx_->err : REDIS_ERR_IO;
    const int saved_errno = errno;
    std::string msg = std::string(what) + " (" + current_.describe() +
                      "): " + (ctx_ && ctx_->errstr[0] ? ctx_->errstr : std::strerror(saved_errno));
    disconnect();  // never reuse a context after an error: hiredis leaves it unusable
    if (err == REDIS_ERR_EOF) throw ClosedError(msg);
    if (err == REDIS_ERR_PROTOCOL) throw ProtocolError(msg);
    if (err == REDIS_ERR_IO && (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK ||
                                saved_errno == ETIMEDOUT || saved_errno == EINPROGRESS))
        throw TimeoutError(msg);
    throw IoError(msg);
}

void Connection::auth_failed(const std::string& reply) {
    disconnect();
    // The server's text never contains the password we sent (WRONGPASS, NOAUTH and
    // "ERR AUTH <password> called without ..." are fixed strings), but redact it anyway.
    std::string text = reply;
    if (const auto& pw = current_.password; !pw.empty())
        for (auto at = text.find(pw); at != std::string::npos; at = text.find(pw, at))
            text.replace(at, pw.size(), "[redacted]");
    if (current_.password.empty())
        throw AuthError("Redis at " + current_.describe() + " requires a password (" + text +
                        "): set redis.password, redis.password_file, redis.password_env or a "
                        "password in redis.url");
    throw AuthError("Redis at " + current_.describe() + " rejected the credentials of user '" +
                    (current_.username.empty() ? "default" : current_.username) + "' (" + text +
                    "): check redis.username and the password source");
}

void Connection::connect() {
    if (options_.sentinel.enabled())
        connect_via_sentinel();
    else
        open(options_.endpoint);
}

void Connection::open(const Endpoint& ep) {
    disconnect();
    current_ = ep;
    if (ep.tls && ep.unix_path.empty()) {
        // Socket, close-on-exec, keep-alive, timeouts and handshake: all in TlsStream.
        tls_ = std::make_unique<TlsStream>(options_.tls ? *options_.tls : default_tls_context(),
                                           ep.host, ep.port, options_.connect_timeout,
                                           options_.socket_timeout, ep.describe());
    } else {
        const timeval ct = to_timeval(options_.connect_timeout);
        ctx_ = ep.unix_path.empty() ? redisConnectWithTimeout(ep.host.c_str(), ep.port, ct)
                                    : redisConnectUnixWithTimeout(ep.unix_path.c_str(), ct);
        if (!ctx_) throw IoError("cannot allocate a Redis context");
        if (ctx_->err) fail_context("cannot connect to Redis");
        // hiredis 0.14 creates its socket without SOCK_CLOEXEC: an exec'd child (exec handlers)
        // must not inherit a connection that is about to be authenticated. (The exec child
        // closes every descriptor above 2 as well, which covers the instant before this call.)
        if (::fcntl(ctx_->fd, F_SETFD, FD_CLOEXEC) != 0) fail_context("cannot set close-on-exec");
        if (redisSetTimeout(ctx_, to_timeval(options_.socket_timeout)) != REDIS_OK)
            fail_context("cannot set the Redis socket timeout");
        // TCP keep-alive notices a peer that vanished without a FIN (host lost).
        if (ep.unix_path.empty()) redisEnableKeepAlive(ctx_);
    }
    stream_ = std::make_shared<ReplyStreamState>();
    try {
        if (!ep.password.empty()) {
            try {
                if (ep.username.empty())
                    run_once(2, std::array<const char*, 2>{"AUTH", ep.password.c_str()}.data(),
                             std::array<size_t, 2>{4, ep.password.size()}.data());
                else
                    run_once(
                        3,
                        std::array<const char*, 3>{"AUTH", ep.username.c_str(), ep.password.c_str()}
                            .data(),
                        std::array<size_t, 3>{4, ep.username.size(), ep.password.size()}.data());
            } catch (const ReplyError& e) {
                auth_failed(e.what());  // any refusal of AUTH is a credentials problem
            }
        }
        if (ep.db != 0) {
            const std::string db = std::to_string(ep.db);
            run_once(2, std::array<const char*, 2>{"SELECT", db.c_str()}.data(),
                     std::array<size_t, 2>{6, db.size()}.data());
        }
        if (!options_.client_name.empty()) {
            const auto& n = options_.client_name;
            try {
                run_once(3, std::array<const char*, 3>{"CLIENT", "SETNAME", n.c_str()}.data(),
                         std::array<size_t, 3>{6, 7, n.size()}.data());
            } catch (const ReplyError& e) {
                // An ACL user without CLIENT (or a managed Redis that renamed the command)
                // still gets a working connection, only an unnamed one.
                if (!e.starts_with("NOPERM") && !e.starts_with("ERR unknown command")) throw;
            }
        } else if (ep.password.empty() && ep.db == 0) {
            // Nothing was sent yet: ask once, so that a server wanting a password says NOAUTH
            // here. Redis closes an unauthenticated connection without a reply when its first
            // request is large (a heartbeat pipeline), and the operator would only see
            // "Server closed the connection".
            run_once(1, std::array<const char*, 1>{"PING"}.data(), std::array<size_t, 1>{4}.data());
        }
    } catch (const ReplyError& e) {
        disconnect();
        throw IoError(std::string("Redis refused the connection setup (") + current_.describe() +
                      "): " + e.what());
    } catch (const IoError& e) {
        // A TLS port drops a plaintext client at its first bytes, without a reply.
        if (ep.tls || !ep.unix_path.empty() || dynamic_cast<const AuthError*>(&e) ||
            dynamic_cast<const TimeoutError*>(&e) || dynamic_cast<const ProtocolError*>(&e))
            throw;
        rethrow_with_hint(e, " (if that port speaks TLS, the URL must be rediss://)");
    }
}

bool Connection::is_master() {
    try {
        auto role =
            run_once(1, std::array<const char*, 1>{"ROLE"}.data(), std::array<size_t, 1>{4}.data());
        return role.size() > 0 && role[0].str() == "master";
    } catch (const ReplyError& e) {
        // An ACL user without ROLE permission (@admin) cannot check: trust the sentinel then.
        return e.starts_with("NOPERM");
    }
}

void Connection::connect_via_sentinel() {
    disconnect();
    const auto& s = options_.sentinel;
    std::string problems;
    auto note = [&](const std::string& p) {
        if (!problems.empty()) problems += "; ";
        problems += p;
    };
    // Ask each sentinel once, starting with the one that answered last time; the caller's
    // reconnect backoff is the retry loop (during a fail-over the answer changes within seconds).
    for (size_t k = 0; k < s.sentinels.size(); ++k) {
        const size_t i = (preferred_sentinel_ + k) % s.sentinels.size();
        const auto& sentinel = s.sentinels[i];
        std::optional<MasterAddress> master;
        try {
            master = ask_sentinel(s, sentinel);
        } catch (const Error& e) {
            note("sentinel " + sentinel.describe() + ": " + e.what());
            continue;
        }
        if (!master) {
            note("sentinel " + sentinel.describe() + " does not know master '" + s.master_name +
                 "'");
            continue;
        }
        Endpoint ep = options_.endpoint;
        ep.unix_path.clear();
        ep.host = master->host;
        ep.port = master->port;
        try {
            open(ep);
            if (!is_master()) {
                disconnect();
                note(ep.describe() + " (named by sentinel " + sentinel.describe() +
                     ") is not a master");
                continue;
            }
        } catch (const AuthError&) {
            throw;  // the master refuses our credentials: asking other sentinels will not help
        } catch (const IoError& e) {
            note(e.what());
            continue;
        }
        preferred_sentinel_ = i;
        return;
    }
    throw IoError("cannot find the Redis " + s.describe() + ": " + problems);
}

redisReply* Connection::tls_exchange(int argc, const char** argv, const size_t* lens,
                                     const char* what) {
    try {
        tls_->append(argc, argv, lens);
        return tls_->read_reply(what);
    } catch (const Error&) {
        disconnect();  // as after a hiredis error: the next command reconnects
        throw;
    }
}

Reply Connection::run_once(int argc, const char** argv, const size_t* lens) {
    connect_if_needed();
    redisReply* raw;
    if (tls_) {
        raw = tls_exchange(argc, argv, lens, "Redis command failed");
    } else {
        raw = static_cast<redisReply*>(redisCommandArgv(ctx_, argc, argv, lens));
        if (!raw) fail_context("Redis command failed");
    }
    Reply reply(raw, stream_);
    if (raw->type == REDIS_REPLY_ERROR) {
        std::string msg(raw->str, raw->len);
        if (msg.rfind("NOAUTH", 0) == 0) auth_failed(msg);  // it wants a password we lack
        throw ReplyError(msg);
    }
    return reply;
}

Reply Connection::run(int argc, const char** argv, const size_t* lens) {
    try {
        return run_once(argc, argv, lens);
    } catch (const ReplyError& e) {
        if (!is_failover_error(e)) throw;
        disconnect();  // the server we talk to is no longer the primary: reconnect, retry once
        return run_once(argc, argv, lens);
    }
}

Reply Connection::command(std::initializer_list<std::string_view> argv) {
    return command(std::vector<std::string_view>(argv));
}

Reply Connection::command(const std::vector<std::string_view>& argv) {
    std::vector<const char*> ptrs;
    std::vector<size_t> lens;
    ptrs.reserve(argv.size());
    lens.reserve(argv.size());
    for (auto a : argv) {
        ptrs.push_back(a.data());
        lens.push_back(a.size());
    }
    return run(static_cast<int>(argv.size()), ptrs.data(), lens.data());
}

Reply Connection::command(const Command& argv) {
    return command(std::vector<std::string_view>(argv.begin(), argv.end()));
}

std::vector<Reply> Connection::pipeline(const std::vector<Command>& commands) {
    auto replies = pipeline_unchecked(commands);
    for (const auto& r : replies) {
        if (!r.is_error()) continue;
        const std::string error(r.error_text());
        if (error.rfind("NOAUTH", 0) == 0) auth_failed(error);
        throw ReplyError(error);
    }
    return replies;
}

std::vector<Reply> Connection::pipeline_unchecked(const std::vector<Command>& commands) {
    connect_if_needed();
    if (tls_) return tls_pipeline(commands);
    for (const auto& cmd : commands) {
        ArgvView argv(cmd);
        if (redisAppendCommandArgv(ctx_, argv.argc(), argv.ptrs.data(), argv.lens.data()) !=
            REDIS_OK)
            fail_context("cannot queue a pipelined Redis command");
    }
    std::vector<Reply> replies;
    replies.reserve(commands.size());
    for (size_t i = 0; i < commands.size(); ++i) {
        void* raw = nullptr;
        if (redisGetReply(ctx_, &raw) != REDIS_OK || !raw) fail_context("Redis pipeline failed");
        replies.emplace_back(static_cast<redisReply*>(raw), stream_);
    }
    return replies;
}

std::vector<Reply> Connection::tls_pipeline(const std::vector<Command>& commands) {
    std::vector<Reply> replies;
    replies.reserve(commands.size());
    try {
        for (const auto& cmd : commands) {
            ArgvView argv(cmd);
            tls_->append(argv.argc(), argv.ptrs.data(), argv.lens.data());
        }
        for (size_t i = 0; i < commands.size(); ++i)
            replies.emplace_back(tls_->read_reply("Redis pipeline failed"), stream_);
    } catch (const Error&) {
        disconnect();
        throw;
    }
    return replies;
}

}  // namespace kiqd::redis
