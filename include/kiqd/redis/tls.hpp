#pragma once
// TLS settings for rediss:// connections (redis.tls in the config) and the OpenSSL context built
// from them. The context is built once, when the configuration is loaded (so an unreadable CA,
// certificate or key stops startup naming its key), and is then shared, read-only, by every
// connection of the process, on any thread: OpenSSL allows creating sessions from one SSL_CTX
// concurrently once it is configured.
#include <memory>
#include <stdexcept>
#include <string>

struct ssl_ctx_st;  // OpenSSL's SSL_CTX, kept out of this public header

namespace kiqd::redis {

struct TlsOptions {
    std::string ca_file;      // PEM bundle of trusted CAs; empty: the system's (with ca_path)
    std::string ca_path;      // directory of hashed CA certificates (c_rehash)
    std::string cert_file;    // client certificate (mutual TLS), PEM; needs key_file
    std::string key_file;     // its private key, PEM, not encrypted
    std::string server_name;  // name checked in the server's certificate (and sent as SNI);
                              // empty: the host of the URL (or the address the sentinel named)
    bool verify_peer = true;  // false: `verify: none`, no certificate check at all
    std::string min_version = "1.2";  // "1.2" or "1.3"
};

// Thrown by TlsContext::create: `field` is the TlsOptions member at fault ("ca_file", ...), so
// the configuration can name its key. The message names the file, never its content.
class TlsSetupError : public std::invalid_argument {
  public:
    TlsSetupError(std::string field, const std::string& message)
        : std::invalid_argument(message), field_(std::move(field)) {}
    const std::string& field() const { return field_; }

  private:
    std::string field_;
};

class TlsContext {
  public:
    // Loads the CA, certificate and key now; throws TlsSetupError.
    static std::shared_ptr<const TlsContext> create(const TlsOptions& options);
    ~TlsContext();
    TlsContext(const TlsContext&) = delete;
    TlsContext& operator=(const TlsContext&) = delete;

    const TlsOptions& options() const { return options_; }
    ssl_ctx_st* native() const { return ctx_; }

  private:
    TlsContext(TlsOptions options, ssl_ctx_st* ctx) : options_(std::move(options)), ctx_(ctx) {}
    TlsOptions options_;
    ssl_ctx_st* ctx_;
};

}  // namespace kiqd::redis
