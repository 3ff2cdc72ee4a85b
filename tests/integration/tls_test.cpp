// TLS to Redis [tls]: a real redis-server listening with --tls-port and certificates made by
// tests/support/tls_certs.sh. kiqd's connection over rediss:// (commands, pipelines, large
// values, mutual TLS), the daemon running jobs over TLS, every bad setup giving one line while
// kiqd keeps retrying, and a TLS server restarted mid-run.
#include <catch2/catch.hpp>
#include <fstream>
#include <thread>

#include "kiqd/redis/connection.hpp"
#include "support/http_get.hpp"
#include "support/job_pushes.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/test_daemon_records.hpp"
#include "support/tls_certs.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using kiqd::test::counter;
using kiqd::test::KiqdProcess;
using kiqd::test::llen;
using kiqd::test::occurrences;
using kiqd::test::RedisServer;
using kiqd::test::TestCerts;
using kiqd::test::TlsMode;
using kiqd::test::wait_until;

namespace {

// The base64 lines of a PEM private key: none of them may ever reach a log.
std::vector<std::string> key_lines(const std::string& path) {
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);)
        if (line.rfind("-----", 0) != 0) lines.push_back(line);
    return lines;
}

void check_no_key_material(const std::string& output) {
    CHECK_THAT(output, !Catch::Contains("PRIVATE KEY"));
    for (const char* key : {"client.key", "server.key", "ca.key"})
        for (const auto& line : key_lines(TestCerts::shared().file(key)))
            CHECK_THAT(output, !Catch::Contains(line.substr(0, 24)));
}

// kiqd against `server` (set up wrongly) with `redis_yaml` as its redis: map: it logs one line
// naming the endpoint and `reason` and keeps running; then `fix` (a CONFIG SET on the server,
// which keeps its port) repairs the server side, and kiqd recovers on its own, which shows it
// kept retrying. The outage is still one line each way, and no key material was ever printed.
void expect_one_line_then_recovery(RedisServer& server, const std::string& redis_yaml,
                                   const std::string& reason, const redis::Command& fix) {
    auto admin = server.connect();
    admin.command({"PING"});  // connected before the fix: a port change keeps this connection
    KiqdProcess kiqd(KIQD_BINARY, "redis: " + redis_yaml + "\nqueues: [default]\nconcurrency: 2\n");
    REQUIRE(kiqd.wait_for_output(reason, std::chrono::seconds(20)));
    CHECK(kiqd.running());
    CHECK_THAT(kiqd.output(),
               Catch::Contains("127.0.0.1:" + std::to_string(server.port()) + "/0): "));
    admin.command(fix);
    REQUIRE(kiqd.wait_for_output("Redis is back after", std::chrono::seconds(30)));
    CHECK(kiqd.running());
    const std::string out = kiqd.output();
    INFO(out);
    CHECK(occurrences(out, "Redis is unreachable") == 1);
    CHECK(occurrences(out, reason) == 1);
    check_no_key_material(out);
    CHECK(kiqd.stop() == 0);
}

// CONFIG SET that makes the server present `leaf` (server, other-server, ...).
redis::Command present(const std::string& leaf) {
    const auto& certs = TestCerts::shared();
    return {"CONFIG",        "SET",
            "tls-cert-file", certs.file(leaf + ".crt"),
            "tls-key-file",  certs.file(leaf + ".key")};
}

}  // namespace

TEST_CASE("tls: commands, pipelines and large values over rediss://", "[tls]") {
    RedisServer server({}, TlsMode{});
    auto c = server.connect();
    CHECK(c.command({"PING"}).str() == "PONG");
    // Larger than a TLS record (16 KiB) and than the read buffer: partial writes and reads.
    const std::string big(3 * 1024 * 1024 + 7, 'x');
    c.command({"SET", "big", big});
    CHECK(c.command({"GET", "big"}).str() == big);
    std::vector<redis::Command> cmds;
    for (int i = 0; i < 1000; ++i) cmds.push_back({"RPUSH", "l", std::to_string(i)});
    const auto replies = c.pipeline(cmds);
    REQUIRE(replies.size() == 1000);
    CHECK(replies.back().integer() == 1000);
    CHECK_THROWS_AS(c.command({"NOSUCHCOMMAND"}), redis::ReplyError);
    CHECK(c.command({"LLEN", "l"}).integer() == 1000);  // still in step after an error reply
}

TEST_CASE("tls: mutual TLS: a client certificate is required and accepted", "[tls]") {
    RedisServer server({}, TlsMode{"server", true});
    CHECK(server.connect().command({"PING"}).str() == "PONG");  // the fixture presents one
    auto o = server.options();
    o.tls = TestCerts::shared().client(false);
    redis::Connection without(o);
    try {
        without.command({"PING"});
        FAIL("a connection without a client certificate was accepted");
    } catch (const redis::IoError& e) {
        CHECK_THAT(e.what(), Catch::Contains("127.0.0.1:" + std::to_string(server.port())));
    }
    CHECK_FALSE(without.connected());
}

TEST_CASE("tls: jobs pushed over rediss:// run in kiqd over mutual TLS", "[tls]") {
    RedisServer server({}, TlsMode{"server", true});
    auto conn = server.connect();
    const auto jids = kiqd::test::push_jobs(conn, 200, [](int i) {
        return nlohmann::ordered_json{{"class", "Test::Record"},
                                      {"args", {"n" + std::to_string(i)}}};
    });
    KiqdProcess kiqd(KIQD_TEST_DAEMON,
                     kiqd::test::default_queue_config(server, "concurrency: 4\nfetch: reliable\n"));
    const bool all_ran =
        wait_until([&] { return kiqd::test::ran_count(conn) >= 200; }, std::chrono::seconds(60));
    INFO(kiqd.output());
    REQUIRE(all_ran);
    CHECK(kiqd::test::jids_of(kiqd::test::ran_records(conn)).size() == 200);
    CHECK(kiqd.stop() == 0);
    CHECK(counter(conn, "stat:processed") == 200);
    CHECK_THAT(kiqd.output(), !Catch::Contains("Redis is unreachable"));
}

TEST_CASE("tls: a server certificate from another CA: one line, retries, no crash",
          "[tls][tls-failure]") {
    RedisServer server({}, TlsMode{});
    expect_one_line_then_recovery(
        server,
        "{url: " + server.url() + ", tls: {ca_file: " + TestCerts::shared().file("other-ca.crt") +
            "}}",
        "TLS certificate verification failed: self-signed certificate in certificate chain",
        present("other-server"));
}

TEST_CASE("tls: an expired server certificate: one line, retries, no crash", "[tls][tls-failure]") {
    RedisServer server({}, TlsMode{"expired"});
    expect_one_line_then_recovery(server, "{url: " + server.url() + server.tls_yaml() + "}",
                                  "TLS certificate verification failed: certificate has expired",
                                  present("server"));
}

TEST_CASE("tls: a certificate for another name: one line, retries, no crash",
          "[tls][tls-failure]") {
    // Checked against the address of the URL, then against a server_name.
    {
        RedisServer server({}, TlsMode{"wrong-name"});
        expect_one_line_then_recovery(server, "{url: " + server.url() + server.tls_yaml() + "}",
                                      "TLS certificate verification failed: IP address mismatch",
                                      present("server"));
    }
    RedisServer server({}, TlsMode{"wrong-name"});
    expect_one_line_then_recovery(
        server,
        "{url: " + server.url() + ", tls: {ca_file: " + TestCerts::shared().file("ca.crt") +
            ", server_name: localhost}}",
        "TLS certificate verification failed: hostname mismatch", present("server"));
}

TEST_CASE("tls: a plaintext server behind rediss://: one line, retries, no crash",
          "[tls][tls-failure]") {
    RedisServer server;
    const auto& certs = TestCerts::shared();
    const std::string port = std::to_string(server.port());
    // The fix turns the plaintext port into a TLS port.
    expect_one_line_then_recovery(
        server, "{url: rediss://127.0.0.1:" + port + "/0, " + certs.yaml() + "}",
        "rediss:// needs a TLS port",
        {"CONFIG", "SET", "tls-cert-file", certs.file("server.crt"), "tls-key-file",
         certs.file("server.key"), "tls-ca-cert-file", certs.file("ca.crt"), "tls-auth-clients",
         "no", "port", "0", "tls-port", port});
}

TEST_CASE("tls: a TLS server behind redis://: one line, retries, no crash", "[tls][tls-failure]") {
    RedisServer server({}, TlsMode{});
    const std::string port = std::to_string(server.port());
    expect_one_line_then_recovery(server, "{url: redis://127.0.0.1:" + port + "/0}",
                                  "if that port speaks TLS, the URL must be rediss://",
                                  {"CONFIG", "SET", "tls-port", "0", "port", port});
}

TEST_CASE("tls: unreadable CA, certificate or key files: check-config and the daemon exit 78",
          "[tls]") {
    const auto& certs = TestCerts::shared();
    const std::string head = "queues: [default]\nredis:\n  url: rediss://127.0.0.1:1/0\n  tls:\n";
    for (const auto& [yaml, key] : std::vector<std::pair<std::string, std::string>>{
             {head + "    ca_file: /nonexistent/ca.crt\n", "redis.tls.ca_file (line 5)"},
             {head + "    cert_file: /nonexistent/c.crt\n    key_file: " +
                  certs.file("client.key") + "\n",
              "redis.tls.cert_file (line 5)"},
             {head + "    cert_file: " + certs.file("client.crt") +
                  "\n    key_file: " + certs.file("issued") + "\n",
              "redis.tls.key_file (line 6)"}}) {
        auto [code, out] = kiqd::test::check_config(KIQD_BINARY, yaml);
        CHECK(code == 78);
        CHECK_THAT(out, Catch::Contains(key));
        KiqdProcess daemon(KIQD_BINARY, yaml);
        CHECK(daemon.wait_exit() == 78);
        CHECK_THAT(daemon.output(), Catch::Contains(key));
    }
}

TEST_CASE("tls: verify: none logs a warning at start", "[tls]") {
    RedisServer server({}, TlsMode{"wrong-name"});
    auto conn = server.connect();
    kiqd::test::push_raw(conn, "default", {kiqd::test::noop_payload("j1")});
    KiqdProcess kiqd(KIQD_BINARY, "redis: {url: " + server.url() +
                                      ", tls: {verify: none}}\nqueues: [default]\n");
    // The job's done line, not an empty queue: a job popped just before the stop is put back.
    REQUIRE(kiqd.wait_for_output("queue=default done", std::chrono::seconds(20)));
    REQUIRE(kiqd.wait_for_output("redis.tls.verify is none"));
    CHECK(kiqd.stop() == 0);
    CHECK(counter(conn, "stat:processed") == 1);
    CHECK(occurrences(kiqd.output(), "redis.tls.verify is none") == 1);
}

TEST_CASE("tls: a TLS server restarted mid-run: one outage line, one recovery line, nothing lost",
          "[tls][outage]") {
    RedisServer server({"--appendonly", "yes"}, TlsMode{});
    auto conn = server.connect();
    constexpr int kJobs = 2000;
    kiqd::test::push_copies(conn, {{"class", "Kiqd::Sleep"}, {"args", {0.005}}, {"retry", true}},
                            kJobs);
    KiqdProcess kiqd(KIQD_BINARY,
                     kiqd::test::default_queue_config(server, "concurrency: 5\nfetch: reliable\n"));
    REQUIRE(wait_until([&] { return llen(conn, "queue:default") <= kJobs - 400; },
                       std::chrono::seconds(60)));
    server.stop();
    REQUIRE(kiqd.wait_for_output("Redis is unreachable"));
    CHECK(kiqd.running());
    server.start();
    auto after = server.connect();
    REQUIRE(wait_until(
        [&] {
            return llen(after, "queue:default") == 0 && counter(after, "stat:processed") >= kJobs;
        },
        std::chrono::seconds(120)));
    CHECK(kiqd.stop() == 0);
    CHECK(counter(after, "stat:processed") == kJobs);
    CHECK(counter(after, "stat:failed") == 0);
    const std::string out = kiqd.output();
    INFO(out);
    CHECK(occurrences(out, "Redis is unreachable") == 1);
    CHECK(occurrences(out, "Redis is back after") == 1);
}

TEST_CASE("tls: the admin command line, kiqd enqueue and the metrics endpoint use TLS", "[tls]") {
    RedisServer server({}, TlsMode{"server", true});
    auto conn = server.connect();
    const kiqd::test::TempDir dir;
    const int metrics_port = kiqd::test::free_port();
    const std::string cfg = dir.write(
        "kiqd.yml",
        kiqd::test::default_queue_config(
            server, "metrics: {listen: 127.0.0.1:" + std::to_string(metrics_port) + "}\n"));
    auto [code, out] = kiqd::test::run_command({KIQD_BINARY, "enqueue", "-C", cfg, "Kiqd::Noop"});
    CHECK(code == 0);
    CHECK(llen(conn, "queue:default") == 1);
    std::tie(code, out) = kiqd::test::run_command({KIQD_BINARY, "queues", "-C", cfg});
    CHECK(code == 0);
    CHECK_THAT(out, Catch::Contains("default"));
    auto [check, summary] = kiqd::test::run_command({KIQD_BINARY, "check-config", "-C", cfg});
    CHECK(check == 0);
    CHECK_THAT(summary, Catch::Contains("over TLS"));
    CHECK_THAT(summary, Catch::Contains("kiqd: 16 Redis connections per process"));

    KiqdProcess kiqd(KIQD_BINARY, kiqd::test::read_file(cfg));
    REQUIRE(
        wait_until([&] { return counter(conn, "stat:processed") == 1; }, std::chrono::seconds(20)));
    REQUIRE(wait_until([&] {
        return kiqd::test::http_get(metrics_port, "/metrics").second.find("kiqd_redis_up 1") !=
               std::string::npos;
    }));
    CHECK(kiqd::test::http_get(metrics_port, "/healthz").first == 200);
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("connections: each is named kiqd:<identity>:<role>, and check-config counts them",
          "[tls][connections]") {
    RedisServer server;
    auto conn = server.connect();
    const std::string yaml =
        kiqd::test::default_queue_config(server, "concurrency: 3\nfetch: reliable\n");
    auto [code, out] = kiqd::test::check_config(KIQD_BINARY, yaml);
    CHECK(code == 0);
    CHECK_THAT(out, Catch::Contains("kiqd: 11 Redis connections per process (3 processors + "
                                    "heartbeat, scheduler, pause control, lock keeper, orphan "
                                    "recovery, liveness, ack flusher, cron poller)"));
    KiqdProcess kiqd(KIQD_BINARY, yaml);
    std::string identity;
    REQUIRE(wait_until([&] {
        auto members = kiqd::test::only_member(conn, "processes");
        if (members) identity = *members;
        return members.has_value();
    }));
    const std::string prefix = "name=kiqd:" + identity + ":";
    std::string list;
    // The scheduler and the cron poller connect at their first poll, the ack flusher when it
    // first has an acknowledgement to send (no job runs here); the others at start.
    REQUIRE(wait_until(
        [&] {
            list = std::string(conn.command({"CLIENT", "LIST"}).str());
            for (const char* role :
                 {"processor-0", "processor-1", "processor-2", "heartbeat", "scheduler",
                  "pause-control", "orphan-recovery", "liveness", "cron"})
                if (list.find(prefix + role + " ") == std::string::npos) return false;
            return true;
        },
        std::chrono::seconds(30)));
    CHECK(occurrences(list, prefix) <= 11);
    CHECK(kiqd.stop() == 0);
}
