// The redis: keys for AUTH (username, password, password_file, password_env, the URL) and
// Sentinel (sentinels, master_name, sentinel_username, sentinel_password): what they resolve
// to, and the ConfigError (key and line) for every misuse. No network.
#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>

#include "kiqd/config.hpp"
#include "kiqd/redis/connection.hpp"
#include "kiqd/redis/sentinel.hpp"
#include "support/config_errors.hpp"
#include "support/scoped_env.hpp"

namespace {

using kiqd::test::default_queue_error_of;
using kiqd::test::load_default_queue;
using kiqd::test::ScopedEnv;

// A temporary file with `content`, removed at scope exit.
struct TempFile {
    explicit TempFile(const std::string& content) {
        char tmpl[] = "/tmp/kiqd-redis-config-XXXXXX";
        const int fd = ::mkstemp(tmpl);
        REQUIRE(fd >= 0);
        ::close(fd);
        path = tmpl;
        std::ofstream(path) << content;
    }
    ~TempFile() { std::remove(path.c_str()); }
    std::string path;
};

}  // namespace

TEST_CASE("redis: no credentials and no sentinels by default", "[config][redis]") {
    ScopedEnv no_url("REDIS_URL", "");
    auto c = load_default_queue("");
    CHECK(c.redis.endpoint.host == "127.0.0.1");
    CHECK(c.redis.endpoint.port == 6379);
    CHECK(c.redis.endpoint.password.empty());
    CHECK(c.redis.endpoint.username.empty());
    CHECK_FALSE(c.redis.sentinel.enabled());
}

TEST_CASE("redis: password and username from YAML", "[config][redis]") {
    auto c = load_default_queue(
        "redis:\n  url: redis://10.0.0.5:6380/2\n  username: worker\n  password: s3cret\n");
    CHECK(c.redis.endpoint.host == "10.0.0.5");
    CHECK(c.redis.endpoint.port == 6380);
    CHECK(c.redis.endpoint.db == 2);
    CHECK(c.redis.endpoint.username == "worker");
    CHECK(c.redis.endpoint.password == "s3cret");
    CHECK(c.redis.password_key == "redis.password");
    // Log lines describe the endpoint without credentials.
    CHECK(c.redis.endpoint.describe() == "10.0.0.5:6380/2");
}

TEST_CASE("redis: password from the URL", "[config][redis]") {
    auto c = load_default_queue("redis: {url: 'redis://alice:p%40ss@127.0.0.1:6379/0'}\n");
    CHECK(c.redis.endpoint.username == "alice");
    CHECK(c.redis.endpoint.password == "p@ss");
    CHECK(c.redis.password_key.empty());
}

TEST_CASE("redis: password_file reads the first line without its newline", "[config][redis]") {
    TempFile f("fr0m-file\nsecond line ignored\n");
    auto c = load_default_queue("redis:\n  password_file: " + f.path + "\n");
    CHECK(c.redis.endpoint.password == "fr0m-file");
    TempFile crlf("crlf-pass\r\n");
    CHECK(
        load_default_queue("redis: {password_file: " + crlf.path + "}\n").redis.endpoint.password ==
        "crlf-pass");
    TempFile no_newline("no-newline");
    CHECK(load_default_queue("redis: {password_file: " + no_newline.path + "}\n")
              .redis.endpoint.password == "no-newline");
}

TEST_CASE("redis: password_env reads the variable", "[config][redis]") {
    ScopedEnv env("KIQD_TEST_REDIS_PASSWORD", "fr0m-env");
    auto c = load_default_queue("redis:\n  password_env: KIQD_TEST_REDIS_PASSWORD\n");
    CHECK(c.redis.endpoint.password == "fr0m-env");
    CHECK(c.redis.password_key == "redis.password_env");
}

TEST_CASE("redis: an environment's redis section replaces the top level's password",
          "[config][redis]") {
    auto c = load_default_queue("redis: {password: top}\nproduction:\n  redis: {password: prod}\n");
    CHECK(c.redis.endpoint.password == "prod");
}

TEST_CASE("redis: exactly one password source, errors name the key and line", "[config][redis]") {
    TempFile f("x\n");
    ScopedEnv env("KIQD_TEST_REDIS_PASSWORD", "fr0m-env");
    // Lines count from 1 and the test prepends "queues: [default]".
    CHECK(default_queue_error_of("redis:\n  password: a\n  password_file: " + f.path + "\n") ==
          "redis.password_file (line 4): conflicts with redis.password (line 3): give the Redis "
          "password in exactly one place");
    CHECK_THAT(
        default_queue_error_of("redis:\n  password_env: KIQD_TEST_REDIS_PASSWORD\n  password: a\n"),
        Catch::StartsWith("redis.password (line 4): conflicts with redis.password_env"));
    CHECK_THAT(
        default_queue_error_of("redis:\n  url: redis://:u@127.0.0.1:6379/0\n  password: a\n"),
        Catch::StartsWith("redis.password (line 4): conflicts with the password in the "
                          "Redis URL"));
    {
        ScopedEnv url("REDIS_URL", "redis://:fromenv@127.0.0.1:6379/0");
        CHECK_THAT(default_queue_error_of("redis:\n  password_file: " + f.path + "\n"),
                   Catch::StartsWith("redis.password_file (line 3): conflicts with the password "
                                     "in the Redis URL (redis.url or REDIS_URL)"));
    }
    CHECK_THAT(default_queue_error_of(
                   "redis:\n  url: redis://bob:pw@127.0.0.1:6379/0\n  username: alice\n"),
               Catch::StartsWith("redis.username (line 4): conflicts with the user name"));
}

TEST_CASE("redis: bad AUTH keys are configuration errors", "[config][redis]") {
    ::unsetenv("KIQD_TEST_NO_SUCH_VARIABLE");
    CHECK(default_queue_error_of("redis:\n  password_file: /nonexistent/kiqd-pw\n") ==
          "redis.password_file (line 3): cannot read '/nonexistent/kiqd-pw'");
    TempFile empty("\nsecond\n");
    CHECK_THAT(default_queue_error_of("redis:\n  password_file: " + empty.path + "\n"),
               Catch::StartsWith("redis.password_file (line 3): the first line of"));
    CHECK(default_queue_error_of("redis:\n  password_env: KIQD_TEST_NO_SUCH_VARIABLE\n") ==
          "redis.password_env (line 3): environment variable KIQD_TEST_NO_SUCH_VARIABLE is not "
          "set or empty");
    CHECK(default_queue_error_of("redis:\n  password: ''\n") ==
          "redis.password (line 3): is empty");
    CHECK(default_queue_error_of("redis:\n  password: [a, b]\n") ==
          "redis.password (line 3): must be a string");
    CHECK(default_queue_error_of("redis:\n  username: alice\n") ==
          "redis.username (line 3): needs a password (redis.password, redis.password_file, "
          "redis.password_env or the URL)");
    CHECK(default_queue_error_of("redis:\n  passwd: x\n") == "redis.passwd (line 3): unknown key");
}

TEST_CASE("redis: no error message contains the password", "[config][redis]") {
    for (const auto& yaml : {
             std::string("redis:\n  password: hunter2-secret\n  password_env: HOME\n"),
             std::string("redis:\n  url: redis://:hunter2-secret@127.0.0.1:6379/0\n  password: "
                         "hunter2-secret\n"),
             std::string("redis:\n  url: redis://:hunter2-secret@127.0.0.1:99999/0\n"),
             std::string("redis:\n  password: hunter2-secret\n  sentinels: [a:1]\n"),
         }) {
        const auto e = default_queue_error_of(yaml);
        CHECK_FALSE(e.empty());
        CHECK(e.find("hunter2-secret") == std::string::npos);
    }
}

TEST_CASE("redis: sentinels and master name", "[config][redis][sentinel]") {
    auto c = load_default_queue(
        "redis:\n"
        "  url: redis://:s3cret@ignored-host:1/3\n"
        "  sentinels: ['127.0.0.1:26379', 'sentinel-b:26380', {host: sentinel-c, port: 5000},\n"
        "              sentinel-d, '[::1]:26381']\n"
        "  master_name: mymaster\n"
        "  sentinel_password: sentinel-pw\n"
        "  sentinel_username: sentinel-user\n");
    const auto& s = c.redis.sentinel;
    REQUIRE(s.sentinels.size() == 5);
    CHECK(s.sentinels[0].host == "127.0.0.1");
    CHECK(s.sentinels[0].port == 26379);
    CHECK(s.sentinels[1].host == "sentinel-b");
    CHECK(s.sentinels[1].port == 26380);
    CHECK(s.sentinels[2].host == "sentinel-c");
    CHECK(s.sentinels[2].port == 5000);
    CHECK(s.sentinels[3].port == 26379);  // the default sentinel port
    CHECK(s.sentinels[4].host == "::1");
    CHECK(s.master_name == "mymaster");
    CHECK(s.password == "sentinel-pw");
    CHECK(s.username == "sentinel-user");
    // The URL still provides db and the master's password.
    CHECK(c.redis.endpoint.db == 3);
    CHECK(c.redis.endpoint.password == "s3cret");
    // What the daemon logs: no credentials of either kind.
    kiqd::redis::ConnectionOptions o{c.redis.endpoint, c.redis.connect_timeout,
                                     std::chrono::milliseconds(5000), "", c.redis.sentinel};
    CHECK(o.describe() ==
          "master 'mymaster' via sentinels 127.0.0.1:26379,sentinel-b:26380,sentinel-c:5000,"
          "sentinel-d:26379,[::1]:26381, db 3");
}

TEST_CASE("redis: bad sentinel keys are configuration errors", "[config][redis][sentinel]") {
    CHECK(default_queue_error_of("redis:\n  sentinels: ['127.0.0.1:26379']\n") ==
          "redis.master_name (line 3): is required with redis.sentinels (the name the sentinels "
          "monitor)");
    CHECK(default_queue_error_of("redis:\n  master_name: mymaster\n") ==
          "redis.master_name (line 3): is only used with redis.sentinels");
    CHECK(default_queue_error_of("redis:\n  sentinel_password: x\n") ==
          "redis.sentinel_password (line 3): is only used with redis.sentinels");
    CHECK(default_queue_error_of("redis:\n  sentinels: []\n  master_name: m\n") ==
          "redis.sentinels (line 3): must be a non-empty list of host:port addresses");
    CHECK(default_queue_error_of("redis:\n  sentinels: '127.0.0.1:26379'\n  master_name: m\n") ==
          "redis.sentinels (line 3): must be a non-empty list of host:port addresses");
    CHECK(default_queue_error_of("redis:\n  sentinels: ['127.0.0.1:0']\n  master_name: m\n") ==
          "redis.sentinels[0] (line 3): invalid port in sentinel address '127.0.0.1:0'");
    CHECK(default_queue_error_of(
              "redis:\n  sentinels:\n    - a:1\n    - 'b:x'\n  master_name: m\n") ==
          "redis.sentinels[1] (line 5): invalid port in sentinel address 'b:x'");
    CHECK(default_queue_error_of(
              "redis:\n  sentinels: [{host: a, port: 70000}]\n  master_name: m\n") ==
          "redis.sentinels[0].port (line 3): must be between 1 and 65535");
    CHECK(default_queue_error_of("redis:\n  sentinels: [[a, 1]]\n  master_name: m\n") ==
          "redis.sentinels[0] (line 3): must be host:port or {host: h, port: p}");
    CHECK(default_queue_error_of("redis:\n  sentinels: ['a:1']\n  master_name: ''\n") ==
          "redis.master_name (line 4): is empty");
    CHECK(default_queue_error_of(
              "redis:\n  url: unix:///tmp/redis.sock\n  sentinels: ['a:1']\n  master_name: "
              "m\n") ==
          "redis.sentinels (line 4): cannot be combined with a unix:// Redis "
          "URL");
}

TEST_CASE("redis: sentinel addresses parse like host:port", "[redis][sentinel]") {
    using kiqd::redis::parse_sentinel_address;
    CHECK(parse_sentinel_address("h:1").describe() == "h:1");
    CHECK(parse_sentinel_address("h").describe() == "h:26379");
    CHECK(parse_sentinel_address("[fe80::1]:7").describe() == "[fe80::1]:7");
    CHECK_THROWS_AS(parse_sentinel_address(""), std::invalid_argument);
    CHECK_THROWS_AS(parse_sentinel_address(":1"), std::invalid_argument);
    CHECK_THROWS_AS(parse_sentinel_address("h:"), std::invalid_argument);
    CHECK_THROWS_AS(parse_sentinel_address("h:65536"), std::invalid_argument);
    CHECK_THROWS_AS(parse_sentinel_address("[::1"), std::invalid_argument);
    CHECK_THROWS_AS(parse_sentinel_address("redis://h:1"), std::invalid_argument);
}
