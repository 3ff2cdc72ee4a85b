#pragma once
// TestCerts: the certificates of the TLS tests (CA, server certificates with the right name, a
// wrong name and expired dates, a client certificate, another CA), made once per test binary by
// tests/support/tls_certs.sh with the openssl command line, in a temporary directory removed at
// exit. Also the redis-server arguments and client contexts that go with them.
#include <memory>
#include <string>
#include <vector>

#include "kiqd/redis/tls.hpp"
#include "support/temp_dir.hpp"

namespace kiqd::test {

class TestCerts {
  public:
    static const TestCerts& shared();
    std::string file(const std::string& name) const { return dir_.file(name); }  // "ca.crt"

    // redis-server arguments for TLS only on `port`: the certificate `leaf` ("server",
    // "wrong-name", "expired"), and with `auth_clients` a client certificate required.
    std::vector<std::string> server_args(int port, const std::string& leaf = "server",
                                         bool auth_clients = false) const;
    // A client context trusting the test CA, presenting client.crt when `client_cert`.
    std::shared_ptr<const redis::TlsContext> client(bool client_cert = false) const;
    // A client context that checks nothing (to reach a server whose certificate is bad).
    std::shared_ptr<const redis::TlsContext> unverified(bool client_cert = false) const;
    // `tls: {...}` YAML for kiqd's redis: map, trusting the test CA (and with the client
    // certificate when `client_cert`).
    std::string yaml(bool client_cert = false) const;

  private:
    TestCerts();
    TempDir dir_{"kiqd-certs"};
};

}  // namespace kiqd::test
