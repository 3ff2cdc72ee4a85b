// The shipped Prometheus rules and Grafana dashboard (config/monitoring/): the rules pass
// `promtool check rules`, and every kiqd_* and process_* metric they or the dashboard name exists
// in a live scrape of a kiqd that has run a job, failed one and seen the cluster.
#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "support/http_get.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_server.hpp"
#include "support/wait_until.hpp"

using kiqd::test::KiqdProcess;
using kiqd::test::RedisServer;
using kiqd::test::wait_until;

namespace {

const std::string kRules = std::string(KIQD_SOURCE_DIR) + "/config/monitoring/kiqd-alerts.yml";
const std::string kDashboard =
    std::string(KIQD_SOURCE_DIR) + "/config/monitoring/kiqd-dashboard.json";

std::string read_all(const std::string& path) {
    std::ifstream in(path);
    REQUIRE(in);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

// The metric names an expression text mentions.
std::set<std::string> metric_names(const std::string& text) {
    static const std::regex name(R"(\b((?:kiqd|process)_[a-z_]+)\b)");
    std::set<std::string> out;
    for (std::sregex_iterator it(text.begin(), text.end(), name), end; it != end; ++it)
        out.insert((*it)[1]);
    return out;
}

// Every sample name in a Prometheus text scrape.
std::set<std::string> scraped_names(const std::string& scrape) {
    std::set<std::string> out;
    std::istringstream in(scrape);
    for (std::string line; std::getline(in, line);) {
        if (line.empty() || line[0] == '#') continue;
        out.insert(line.substr(0, line.find_first_of("{ ")));
    }
    return out;
}

}  // namespace

TEST_CASE("monitoring: the alert rules pass promtool", "[monitoring]") {
    const auto [status, out] =
        kiqd::test::run_command({"/usr/bin/promtool", "check", "rules", kRules});
    if (status == 127 || out.find("No such file") != std::string::npos) {
        WARN("promtool is not installed (Debian package prometheus): rules not checked");
        return;
    }
    INFO(out);
    CHECK(status == 0);
    CHECK_THAT(out, Catch::Contains("SUCCESS"));
}

TEST_CASE("monitoring: every metric the rules and the dashboard use is in a live scrape",
          "[monitoring]") {
    auto& server = RedisServer::shared();
    server.flushall();
    const int port = kiqd::test::free_port();
    KiqdProcess kiqd(KIQD_BINARY,
                     kiqd::test::kiqd_config(server, "queues: [default]\nconcurrency: 2\n" +
                                                         kiqd::test::metrics_listen(port)));
    auto conn = server.connect();
    for (const char* cls : {"Kiqd::Noop", "Kiqd::Fail"}) {
        const nlohmann::json job{{"class", cls},
                                 {"args", nlohmann::json::array()},
                                 {"jid", std::string("jid-") + cls},
                                 {"queue", "default"},
                                 {"retry", 1},
                                 {"enqueued_at", 1.0}};
        conn.command({"LPUSH", "queue:default", job.dump()});
    }
    REQUIRE(wait_until([&] {
        return conn.command({"ZCARD", "retry"}).integer() == 1 &&
               kiqd.output().find("jid=jid-Kiqd::Noop") != std::string::npos;
    }));
    std::string scrape;
    REQUIRE(wait_until([&] {
        auto [status, body] = kiqd::test::http_get(port, "/metrics");
        scrape = body;
        return status == 200 && body.find("kiqd_jobs_retried_total 1") != std::string::npos;
    }));
    INFO(scrape);
    const auto have = scraped_names(scrape);
    // Dashboard: every target's expr, parsed as JSON (so the file must be valid JSON too).
    const auto dashboard = nlohmann::json::parse(read_all(kDashboard));
    std::string exprs;
    for (const auto& panel : dashboard.at("panels"))
        if (panel.contains("targets"))
            for (const auto& t : panel.at("targets"))
                exprs += t.at("expr").get<std::string>() + "\n";
    for (const auto& v : dashboard.at("templating").at("list"))
        if (v.contains("query") && v.at("query").is_string())
            exprs += v.at("query").get<std::string>();
    for (const auto& group : YAML::LoadFile(kRules)["groups"])
        for (const auto& rule : group["rules"]) exprs += rule["expr"].as<std::string>() + "\n";
    const auto used = metric_names(exprs);
    CHECK(used.size() > 20);
    for (const auto& name : used) {
        INFO("metric used by config/monitoring/: " << name);
        CHECK(have.count(name) == 1);
    }
    // The cluster gauges see this process and the failed job waiting in the retry set.
    CHECK_THAT(scrape, Catch::Contains("\nkiqd_cluster_processes 1\n") &&
                           Catch::Contains("\nkiqd_cluster_retry_jobs 1\n") &&
                           Catch::Contains("kiqd_build_info{version=\"" KIQD_VERSION "\"} 1"));
    CHECK_THAT(scrape, Catch::Contains("worker=\"Kiqd::Noop\""));
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("docker: the health check asks this process's /healthz", "[docker][monitoring]") {
    const std::string check = std::string(KIQD_SOURCE_DIR) + "/docker/healthcheck";
    const int port = kiqd::test::free_port();
    const std::map<std::string, std::string> env{{"KIQD_METRICS_PORT", std::to_string(port)}};
    // Nothing listening: unhealthy.
    CHECK(kiqd::test::run_command({"/bin/bash", check}, env).first != 0);
    auto& server = RedisServer::shared();
    server.flushall();
    KiqdProcess kiqd(KIQD_BINARY,
                     kiqd::test::kiqd_config(server, "queues: [default]\nconcurrency: 1\n" +
                                                         kiqd::test::metrics_listen(port)));
    REQUIRE(wait_until([&] { return kiqd::test::http_get(port, "/healthz").first == 200; }));
    const auto [status, out] = kiqd::test::run_command({"/bin/bash", check}, env);
    INFO(out);
    CHECK(status == 0);
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("metrics: Redis reconnects are counted", "[monitoring]") {
    auto& server = RedisServer::shared();
    server.flushall();
    const int port = kiqd::test::free_port();
    KiqdProcess kiqd(KIQD_BINARY,
                     kiqd::test::kiqd_config(server, "queues: [default]\nconcurrency: 1\n" +
                                                         kiqd::test::metrics_listen(port)));
    auto scrape = [&] { return kiqd::test::http_get(port, "/metrics"); };
    REQUIRE(wait_until([&] {
        return scrape().second.find("\nkiqd_redis_reconnects_total 0\n") != std::string::npos;
    }));
    // Every connection of kiqd's is dropped by the server (not this test's own: SKIPME).
    auto conn = server.connect();
    REQUIRE(conn.command({"CLIENT", "KILL", "TYPE", "normal"}).integer() > 0);
    CHECK(wait_until([&] {
        const std::string body = scrape().second;
        const auto at = body.find("\nkiqd_redis_reconnects_total ");
        return at != std::string::npos &&
               std::stoll(body.substr(at + std::string("\nkiqd_redis_reconnects_total ").size())) >=
                   1;
    }));
    CHECK(kiqd.stop() == 0);
}
