// TlsContext: the OpenSSL client context for rediss:// (see kiqd/redis/tls.hpp). Built on the
// main thread while the configuration loads; read-only afterwards.
#include "kiqd/redis/tls.hpp"

#include <dirent.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace kiqd::redis {
namespace {

// The oldest queued OpenSSL error as text ("...:no certificate or crl found"); clears the queue.
// OpenSSL's messages name what failed, never the bytes of a key.
std::string openssl_error() {
    const unsigned long code = ERR_get_error();
    ERR_clear_error();
    if (code == 0) return "unknown OpenSSL error";
    char buf[256];
    ERR_error_string_n(code, buf, sizeof buf);
    return buf;
}

// A clear "cannot read" (with errno's reason) before OpenSSL's terser message.
void require_readable(const std::string& field, const std::string& path) {
    if (std::FILE* f = std::fopen(path.c_str(), "r")) {
        std::fclose(f);
        return;
    }
    throw TlsSetupError(field, "cannot read '" + path + "': " + std::strerror(errno));
}

// An encrypted key would make OpenSSL prompt on the terminal: refuse instead (no passphrase).
int refuse_passphrase(char*, int, int, void*) {
    return 0;
}

}  // namespace

std::shared_ptr<const TlsContext> TlsContext::create(const TlsOptions& o) {
    if (o.min_version != "1.2" && o.min_version != "1.3")
        throw TlsSetupError("min_version",
                            "must be \"1.2\" or \"1.3\", not '" + o.min_version + "'");
    if (o.cert_file.empty() != o.key_file.empty())
        throw TlsSetupError(o.cert_file.empty() ? "cert_file" : "key_file",
                            "cert_file and key_file go together (a client certificate needs its "
                            "key)");
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) throw TlsSetupError("", "cannot create a TLS context: " + openssl_error());
    std::shared_ptr<const TlsContext> result(new TlsContext(o, ctx));  // frees ctx on a throw
    SSL_CTX_set_min_proto_version(ctx, o.min_version == "1.3" ? TLS1_3_VERSION : TLS1_2_VERSION);
    // Connections are non-blocking (tls_stream.cpp): a write may be retried from a buffer that
    // has grown, and may complete in parts.
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_default_passwd_cb(ctx, refuse_passphrase);
    SSL_CTX_set_verify(ctx, o.verify_peer ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, nullptr);
    // The files are loaded even with verify: none, so a wrong path is found at startup anyway.
    if (!o.ca_file.empty()) {
        require_readable("ca_file", o.ca_file);
        if (SSL_CTX_load_verify_file(ctx, o.ca_file.c_str()) != 1)
            throw TlsSetupError("ca_file", "cannot load CA certificates from '" + o.ca_file +
                                               "': " + openssl_error());
    }
    if (!o.ca_path.empty()) {
        DIR* dir = ::opendir(o.ca_path.c_str());
        if (!dir)
            throw TlsSetupError("ca_path", "cannot read the directory '" + o.ca_path +
                                               "': " + std::strerror(errno));
        ::closedir(dir);
        if (SSL_CTX_load_verify_dir(ctx, o.ca_path.c_str()) != 1)
            throw TlsSetupError("ca_path", "cannot use '" + o.ca_path + "': " + openssl_error());
    }
    if (o.ca_file.empty() && o.ca_path.empty() && SSL_CTX_set_default_verify_paths(ctx) != 1)
        throw TlsSetupError("ca_file",
                            "cannot load the system's CA certificates: " + openssl_error());
    if (!o.cert_file.empty()) {
        require_readable("cert_file", o.cert_file);
        if (SSL_CTX_use_certificate_chain_file(ctx, o.cert_file.c_str()) != 1)
            throw TlsSetupError("cert_file", "cannot load a PEM certificate from '" + o.cert_file +
                                                 "': " + openssl_error());
        require_readable("key_file", o.key_file);
        if (SSL_CTX_use_PrivateKey_file(ctx, o.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
            if (ERR_GET_REASON(ERR_peek_error()) == X509_R_KEY_VALUES_MISMATCH) {
                ERR_clear_error();
                throw TlsSetupError("key_file",
                                    "'" + o.key_file + "' is not the key of '" + o.cert_file + "'");
            }
            throw TlsSetupError("key_file", "cannot load an unencrypted PEM private key from '" +
                                                o.key_file + "': " + openssl_error());
        }
        if (SSL_CTX_check_private_key(ctx) != 1)
            throw TlsSetupError("key_file", "'" + o.key_file + "' is not the key of '" +
                                                o.cert_file + "': " + openssl_error());
    }
    ERR_clear_error();
    return result;
}

TlsContext::~TlsContext() {
    SSL_CTX_free(ctx_);
}

}  // namespace kiqd::redis
