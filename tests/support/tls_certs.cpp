#include "support/tls_certs.hpp"

#include <stdexcept>

#include "support/kiqd_process.hpp"

namespace kiqd::test {

TestCerts::TestCerts() {
    const auto [status, output] = run_command(
        {"/bin/sh", std::string(KIQD_SOURCE_DIR) + "/tests/support/tls_certs.sh", dir_.path()});
    if (status != 0) throw std::runtime_error("tls_certs.sh failed: " + output);
}

const TestCerts& TestCerts::shared() {
    static const TestCerts certs;
    return certs;
}

std::vector<std::string> TestCerts::server_args(int port, const std::string& leaf,
                                                bool auth_clients) const {
    return {"--port",
            "0",
            "--tls-port",
            std::to_string(port),
            "--tls-cert-file",
            file(leaf + ".crt"),
            "--tls-key-file",
            file(leaf + ".key"),
            "--tls-ca-cert-file",
            file("ca.crt"),
            "--tls-auth-clients",
            auth_clients ? "yes" : "no"};
}

std::shared_ptr<const redis::TlsContext> TestCerts::client(bool client_cert) const {
    redis::TlsOptions o;
    o.ca_file = file("ca.crt");
    if (client_cert) {
        o.cert_file = file("client.crt");
        o.key_file = file("client.key");
    }
    return redis::TlsContext::create(o);
}

std::shared_ptr<const redis::TlsContext> TestCerts::unverified(bool client_cert) const {
    redis::TlsOptions o;
    o.verify_peer = false;
    if (client_cert) {
        o.cert_file = file("client.crt");
        o.key_file = file("client.key");
    }
    return redis::TlsContext::create(o);
}

std::string TestCerts::yaml(bool client_cert) const {
    std::string y = "tls: {ca_file: " + file("ca.crt");
    if (client_cert)
        y += ", cert_file: " + file("client.crt") + ", key_file: " + file("client.key");
    return y + "}";
}

}  // namespace kiqd::test
