// The redis: keys for TLS (rediss:// URLs, redis.tls.*, REDIS_TLS_* variables, sentinel_tls):
// what they resolve to, and the ConfigError (key and line) for every file kiqd cannot use.
// Certificates come from tests/support/tls_certs.sh; no network.
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "kiqd/config.hpp"
#include "kiqd/redis/endpoint.hpp"
#include "support/config_errors.hpp"
#include "support/scoped_env.hpp"
#include "support/temp_dir.hpp"
#include "support/tls_certs.hpp"

namespace {

using kiqd::test::default_queue_error_of;
using kiqd::test::load_default_queue;
using kiqd::test::ScopedEnv;
using kiqd::test::TestCerts;

std::string cert(const std::string& name) {
    return TestCerts::shared().file(name);
}

}  // namespace

TEST_CASE("tls: rediss:// URLs parse with the TLS flag, redis:// without", "[config][tls]") {
    const auto ep = kiqd::redis::parse_redis_url("rediss://:pw@cache.example:6380/3");
    CHECK(ep.tls);
    CHECK(ep.host == "cache.example");
    CHECK(ep.port == 6380);
    CHECK(ep.db == 3);
    CHECK(ep.password == "pw");
    CHECK_FALSE(kiqd::redis::parse_redis_url("redis://127.0.0.1:6379/0").tls);
    CHECK_THROWS_AS(kiqd::redis::parse_redis_url("redisss://x"), std::invalid_argument);
}

TEST_CASE("tls: a rediss:// URL builds a context; redis:// builds none", "[config][tls]") {
    const auto c = load_default_queue(
        "redis:\n  url: rediss://127.0.0.1:6380/0\n  tls:\n    ca_file: " + cert("ca.crt") +
        "\n    server_name: localhost\n    min_version: \"1.3\"\n");
    REQUIRE(c.redis.tls_context);
    CHECK(c.redis.endpoint.tls);
    CHECK(c.redis.tls.server_name == "localhost");
    CHECK(c.redis.tls.min_version == "1.3");
    CHECK(c.redis.tls.verify_peer);
    CHECK_FALSE(load_default_queue("redis: redis://127.0.0.1:6379/0\n").redis.tls_context);
    // Without tls: keys: the system's CAs.
    CHECK(load_default_queue("redis: rediss://127.0.0.1:6380/0\n").redis.tls_context);
}

TEST_CASE("tls: mutual TLS and verify: none load", "[config][tls]") {
    const auto c = load_default_queue(
        "redis:\n  url: rediss://127.0.0.1:6380/0\n  tls:\n    ca_file: " + cert("ca.crt") +
        "\n    cert_file: " + cert("client.crt") + "\n    key_file: " + cert("client.key") +
        "\n    verify: none\n");
    CHECK(c.redis.tls_context);
    CHECK_FALSE(c.redis.tls.verify_peer);
}

TEST_CASE("tls: each unusable file is a ConfigError naming its key and line", "[config][tls]") {
    const std::string head = "redis:\n  url: rediss://127.0.0.1:6380/0\n  tls:\n";
    CHECK(default_queue_error_of(head + "    ca_file: /nonexistent/ca.pem\n") ==
          "redis.tls.ca_file (line 5): cannot read '/nonexistent/ca.pem': No such file or "
          "directory");
    CHECK(default_queue_error_of(head + "    ca_path: /nonexistent/certs\n") ==
          "redis.tls.ca_path (line 5): cannot read the directory '/nonexistent/certs': No such "
          "file or directory");
    CHECK(default_queue_error_of(head + "    cert_file: /nonexistent/c.pem\n    key_file: " +
                                 cert("client.key") + "\n") ==
          "redis.tls.cert_file (line 5): cannot read '/nonexistent/c.pem': No such file or "
          "directory");
    CHECK(default_queue_error_of(head + "    cert_file: " + cert("client.crt") +
                                 "\n    key_file: /nonexistent/k.pem\n") ==
          "redis.tls.key_file (line 6): cannot read '/nonexistent/k.pem': No such file or "
          "directory");
    // A file that is there but is not what the key says.
    CHECK_THAT(default_queue_error_of(head + "    ca_file: " + cert("ca.cnf") + "\n"),
               Catch::StartsWith("redis.tls.ca_file (line 5): cannot load CA certificates from"));
    CHECK_THAT(default_queue_error_of(head + "    cert_file: " + cert("client.key") +
                                      "\n    key_file: " + cert("client.key") + "\n"),
               Catch::StartsWith("redis.tls.cert_file (line 5): cannot load a PEM certificate"));
    // The key of another certificate.
    CHECK_THAT(default_queue_error_of(head + "    cert_file: " + cert("client.crt") +
                                      "\n    key_file: " + cert("server.key") + "\n"),
               Catch::StartsWith("redis.tls.key_file (line 6): '" + cert("server.key") +
                                 "' is not the key of"));
    CHECK_THAT(default_queue_error_of(head + "    cert_file: " + cert("client.crt") + "\n"),
               Catch::StartsWith("redis.tls.key_file (line 5): cert_file and key_file go "
                                 "together"));
    CHECK(default_queue_error_of(head + "    verify: maybe\n") ==
          "redis.tls.verify (line 5): must be peer or none, not 'maybe'");
    CHECK(default_queue_error_of(head + "    min_version: \"1.1\"\n") ==
          "redis.tls.min_version (line 5): must be \"1.2\" or \"1.3\", not '1.1'");
    CHECK(default_queue_error_of(head + "    cafile: x\n") ==
          "redis.tls.cafile (line 5): unknown key");
}

TEST_CASE("tls: no message quotes a key file's content", "[config][tls]") {
    // A private key given as the CA bundle: OpenSSL's error names the file, never the bytes.
    std::ifstream in(cert("client.key"));
    std::string first, second;
    std::getline(in, first);
    std::getline(in, second);  // the first line of base64 key material
    REQUIRE(second.size() > 20);
    const auto e = default_queue_error_of(
        "redis:\n  url: rediss://127.0.0.1:6380/0\n  tls: {ca_file: " + cert("client.key") + "}\n");
    CHECK_THAT(e, Catch::StartsWith("redis.tls.ca_file"));
    CHECK_THAT(e, !Catch::Contains(second.substr(0, 16)));
}

TEST_CASE("tls: redis.tls with a plain URL, and sentinel_tls without sentinels, are refused",
          "[config][tls]") {
    CHECK(default_queue_error_of(
              "redis:\n  url: redis://127.0.0.1:6379/0\n  tls: {verify: none}\n") ==
          "redis.tls (line 4): is only used with a rediss:// URL (redis.url or REDIS_URL) or "
          "redis.sentinel_tls");
    CHECK(
        default_queue_error_of("redis:\n  url: redis://127.0.0.1:6379/0\n  sentinel_tls: true\n") ==
        "redis.sentinel_tls (line 4): is only used with redis.sentinels");
}

TEST_CASE("tls: REDIS_TLS_* give the keys the YAML leaves out", "[config][tls]") {
    ScopedEnv ca("REDIS_TLS_CA_FILE", cert("ca.crt"));
    ScopedEnv name("REDIS_TLS_SERVER_NAME", "from-env");
    ScopedEnv verify("REDIS_TLS_VERIFY", "none");
    auto c = load_default_queue(
        "redis:\n  url: rediss://127.0.0.1:6380/0\n  tls: {server_name: from-yaml}\n");
    CHECK(c.redis.tls.ca_file == cert("ca.crt"));
    CHECK(c.redis.tls.server_name == "from-yaml");  // the YAML wins
    CHECK_FALSE(c.redis.tls.verify_peer);
    {
        ScopedEnv bad("REDIS_TLS_KEY_FILE", "/nonexistent/k.pem");
        ScopedEnv crt("REDIS_TLS_CERT_FILE", cert("client.crt"));
        CHECK(default_queue_error_of("redis: rediss://127.0.0.1:6380/0\n") ==
              "REDIS_TLS_KEY_FILE (redis.tls.key_file): cannot read '/nonexistent/k.pem': No "
              "such file or directory");
    }
    // With a plain URL the variables are not used (nothing to check, nothing to refuse).
    CHECK_FALSE(load_default_queue("redis: redis://127.0.0.1:6379/0\n").redis.tls_context);
}

TEST_CASE("tls: sentinel_tls asks the sentinels over TLS", "[config][tls][sentinel]") {
    const std::string s = "redis:\n  sentinels: [\"127.0.0.1:26379\"]\n  master_name: m\n";
    auto c =
        load_default_queue(s + "  url: rediss://x/0\n  tls: {ca_file: " + cert("ca.crt") + "}\n");
    CHECK(c.redis.sentinel.tls);  // as the URL, by default
    c = load_default_queue(s + "  url: rediss://x/0\n  sentinel_tls: false\n");
    CHECK_FALSE(c.redis.sentinel.tls);
    CHECK(c.redis.endpoint.tls);
    c = load_default_queue(
        s + "  url: redis://x/0\n  sentinel_tls: true\n  tls: {ca_file: " + cert("ca.crt") + "}\n");
    CHECK(c.redis.sentinel.tls);
    CHECK_FALSE(c.redis.endpoint.tls);
}
