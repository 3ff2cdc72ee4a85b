// Worker metadata against a real Redis and real daemons: the Prometheus endpoint (parsed by a
// small text-format parser below), SLO counters, /healthz, queue selectors and the cpu-bound cap.
#include <signal.h>

#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "kiqd/clock.hpp"
#include "support/http_get.hpp"
#include "support/job_pushes.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/test_daemon_records.hpp"
#include "support/wait_until.hpp"

using kiqd::test::http_get;
using kiqd::test::KiqdProcess;
using kiqd::test::llen;
using kiqd::test::ran_records;
using kiqd::test::RedisServer;
using kiqd::test::wait_until;

namespace {

// ---- a Prometheus text-format (0.0.4) parser, strict enough to catch format mistakes ----

struct Sample {
    std::string name;
    std::map<std::string, std::string> labels;
    double value;
};

struct Exposition {
    std::map<std::string, std::string> types;  // family → counter/gauge/histogram/...
    std::vector<Sample> samples;

    // The one sample with this name and these labels (a subset is enough); throws otherwise.
    double value(const std::string& name, const std::map<std::string, std::string>& want) const {
        const Sample* found = nullptr;
        for (const auto& s : samples) {
            if (s.name != name) continue;
            bool all = true;
            for (const auto& [k, v] : want) {
                auto it = s.labels.find(k);
                all = all && it != s.labels.end() && it->second == v;
            }
            if (!all) continue;
            if (found) throw std::runtime_error("two samples match " + name);
            found = &s;
        }
        if (!found) throw std::runtime_error("no sample " + name);
        return found->value;
    }
};

Exposition parse_prometheus(const std::string& text) {
    static const std::regex metric_name(R"(^[a-zA-Z_:][a-zA-Z0-9_:]*$)");
    static const std::regex label_name(R"(^[a-zA-Z_][a-zA-Z0-9_]*$)");
    Exposition e;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        if (line.rfind("# TYPE ", 0) == 0) {
            std::istringstream t(line.substr(7));
            std::string name, type;
            t >> name >> type;
            if (!std::regex_match(name, metric_name)) throw std::runtime_error("bad name " + name);
            if (type != "counter" && type != "gauge" && type != "histogram" && type != "summary" &&
                type != "untyped")
                throw std::runtime_error("bad type " + line);
            if (e.types.count(name)) throw std::runtime_error("TYPE twice: " + name);
            e.types[name] = type;
            continue;
        }
        if (line[0] == '#') continue;  // HELP and comments
        Sample s;
        size_t i = line.find_first_of("{ ");
        if (i == std::string::npos) throw std::runtime_error("no value: " + line);
        s.name = line.substr(0, i);
        if (!std::regex_match(s.name, metric_name)) throw std::runtime_error("bad name " + line);
        if (line[i] == '{') {
            ++i;
            while (line.at(i) != '}') {
                const size_t eq = line.find('=', i);
                const std::string key = line.substr(i, eq - i);
                if (!std::regex_match(key, label_name)) throw std::runtime_error("label " + line);
                if (line.at(eq + 1) != '"') throw std::runtime_error("unquoted label " + line);
                std::string value;
                size_t j = eq + 2;
                for (; line.at(j) != '"'; ++j) {
                    if (line[j] == '\\') {
                        const char c = line.at(++j);
                        value += c == 'n' ? '\n' : c;
                    } else {
                        value += line[j];
                    }
                }
                if (s.labels.count(key)) throw std::runtime_error("label twice " + line);
                s.labels[key] = value;
                i = j + 1;
                if (line.at(i) == ',') ++i;
            }
            ++i;
        }
        if (line.at(i) != ' ') throw std::runtime_error("no space before value: " + line);
        const std::string v = line.substr(i + 1);
        char* end = nullptr;
        s.value = v == "+Inf" ? INFINITY : std::strtod(v.c_str(), &end);
        if (v != "+Inf" && (end == v.c_str() || *end != '\0'))
            throw std::runtime_error("bad value: " + line);
        e.samples.push_back(std::move(s));
    }
    // Every sample belongs to a TYPEd family; histogram families only have _bucket/_sum/_count.
    for (const auto& s : e.samples) {
        std::string family = s.name;
        for (const char* suffix : {"_bucket", "_sum", "_count"}) {
            const std::string sfx = suffix;
            if (family.size() > sfx.size() &&
                family.compare(family.size() - sfx.size(), sfx.size(), sfx) == 0 &&
                e.types.count(family.substr(0, family.size() - sfx.size())) &&
                e.types.at(family.substr(0, family.size() - sfx.size())) == "histogram") {
                family = family.substr(0, family.size() - sfx.size());
                break;
            }
        }
        if (!e.types.count(family)) throw std::runtime_error("sample without TYPE: " + s.name);
        if (e.types.at(family) == "histogram" && family == s.name)
            throw std::runtime_error("bare histogram sample " + s.name);
        if (e.types.at(family) == "counter" && s.name.size() > 6 &&
            s.name.compare(s.name.size() - 6, 6, "_total") != 0)
            throw std::runtime_error("counter without _total: " + s.name);
    }
    return e;
}

// Checks every histogram series: buckets ascend by le, counts never decrease, the +Inf bucket
// equals _count. Returns the number of series checked.
size_t check_histograms(const Exposition& e) {
    size_t checked = 0;
    for (const auto& [family, type] : e.types) {
        if (type != "histogram") continue;
        std::map<std::map<std::string, std::string>, std::vector<std::pair<double, double>>> series;
        for (const auto& s : e.samples) {
            if (s.name != family + "_bucket") continue;
            auto labels = s.labels;
            REQUIRE(labels.count("le"));
            const std::string le = labels["le"];
            labels.erase("le");
            series[labels].push_back({le == "+Inf" ? INFINITY : std::stod(le), s.value});
        }
        for (const auto& [labels, buckets] : series) {
            REQUIRE(buckets.back().first == INFINITY);
            for (size_t i = 1; i < buckets.size(); ++i) {
                CHECK(buckets[i].first > buckets[i - 1].first);
                CHECK(buckets[i].second >= buckets[i - 1].second);
            }
            CHECK(buckets.back().second == e.value(family + "_count", labels));
            CHECK(e.value(family + "_sum", labels) >= 0);
            ++checked;
        }
    }
    return checked;
}

// Pushes a Test::Record-style job as a Ruby client would, with a chosen enqueued_at.
void push_job(kiqd::redis::Connection& c, const std::string& cls, const std::string& queue,
              double enqueued_at, nlohmann::json args = nlohmann::json::array()) {
    static int n = 0;
    nlohmann::json job{{"class", cls},
                       {"args", args},
                       {"queue", queue},
                       {"retry", false},
                       {"jid", "metrics" + std::to_string(++n)},
                       {"created_at", enqueued_at},
                       {"enqueued_at", enqueued_at}};
    kiqd::test::push_raw(c, queue, {job.dump()});
}

// The heartbeat `info` of the only process in `processes`, once it has written one.
nlohmann::json only_process_info(kiqd::redis::Connection& c) {
    std::string info;
    REQUIRE(wait_until([&] {
        const auto identity = kiqd::test::only_member(c, "processes");
        if (!identity) return false;
        auto i = c.command({"HGET", *identity, "info"});
        if (i.is_nil()) return false;
        info = std::string(i.str());
        return true;
    }));
    return nlohmann::json::parse(info);
}

}  // namespace

TEST_CASE("metrics: /metrics in Prometheus format, SLO counters, /healthz, clean stop",
          "[metrics][metadata]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto c = server.connect();
    const int port = kiqd::test::free_port();
    const std::string yaml = kiqd::test::kiqd_config(
        server, "queues: [default, urgent]\nconcurrency: 3\nmetrics: {listen: \"127.0.0.1:" +
                    std::to_string(port) + "\"}\n" + R"(handlers:
  Test::Record:
    queue: urgent
    urgency: high
    resource_boundary: cpu
    feature_category: testing
  Test::FailOnce:
    urgency: throttled
)");
    KiqdProcess p(KIQD_TEST_DAEMON, yaml);
    REQUIRE(wait_until([&] { return http_get(port, "/healthz").first == 200; }));
    CHECK(http_get(port, "/healthz").second == "ok\n");
    CHECK(http_get(port, "/nothing").first == 404);

    const double now = kiqd::epoch_seconds();
    // Two high-urgency jobs on time, one that waited 30 s (its enqueued_at is in the past): the
    // high scheduling target is 10 s.
    push_job(c, "Test::Record", "urgent", now);
    push_job(c, "Test::Record", "urgent", now);
    push_job(c, "Test::Record", "urgent", now - 30);
    // A throttled job that fails: failed counter; throttled has no scheduling target.
    push_job(c, "Test::FailOnce", "default", now - 120);
    // A job that burns 0.2 s of its thread's CPU time: the CPU counter must show at least that.
    push_job(c, "Test::Burn", "default", now, nlohmann::json::array({0.2}));
    REQUIRE(wait_until([&] { return ran_records(c).size() == 4; }));

    Exposition e;
    REQUIRE(wait_until([&] {
        auto [status, body] = http_get(port, "/metrics");
        if (status != 200) return false;
        e = parse_prometheus(body);
        try {
            // The burning job is not among the records awaited above: await its run too (a
            // loaded machine takes longer than 0.2 s of wall time for its 0.2 s of CPU).
            return e.value("kiqd_jobs_failed_total", {{"class", "Test::FailOnce"}}) == 1 &&
                   e.value("kiqd_jobs_processed_total", {{"class", "Test::Burn"}}) == 1;
        } catch (const std::exception&) {
            return false;
        }
    }));
    const std::map<std::string, std::string> record{
        {"class", "Test::Record"}, {"queue", "urgent"}, {"urgency", "high"}};
    CHECK(e.types.at("kiqd_jobs_processed_total") == "counter");
    CHECK(e.types.at("kiqd_job_run_seconds") == "histogram");
    CHECK(e.types.at("kiqd_job_scheduling_latency_seconds") == "histogram");
    CHECK(e.types.at("kiqd_busy_threads") == "gauge");
    CHECK(e.value("kiqd_jobs_processed_total", record) == 3);
    CHECK(e.value("kiqd_jobs_failed_total", record) == 0);
    CHECK(e.value("kiqd_jobs_processed_total",
                  {{"class", "Test::FailOnce"}, {"queue", "default"}, {"urgency", "throttled"}}) ==
          1);
    CHECK(e.value("kiqd_job_run_seconds_count", record) == 3);
    CHECK(e.value("kiqd_job_scheduling_latency_seconds_count", record) == 3);
    // The late job is in no bucket below 10 s but in the 30 s one.
    CHECK(e.value("kiqd_job_scheduling_latency_seconds_bucket",
                  {{"class", "Test::Record"}, {"le", "10"}}) == 2);
    CHECK(e.value("kiqd_job_scheduling_latency_seconds_bucket",
                  {{"class", "Test::Record"}, {"le", "60"}}) == 3);
    CHECK(e.value("kiqd_slo_scheduling_missed_total", {{"urgency", "high"}}) == 1);
    CHECK(e.value("kiqd_slo_scheduling_met_total", {{"urgency", "high"}}) == 2);
    CHECK(e.value("kiqd_slo_execution_met_total", {{"urgency", "high"}}) == 3);
    CHECK(e.value("kiqd_slo_execution_met_total", {{"urgency", "throttled"}}) == 1);
    CHECK_THROWS(e.value("kiqd_slo_scheduling_met_total", {{"urgency", "throttled"}}));
    CHECK(e.value("kiqd_threads", {}) == 3);
    CHECK(e.value("kiqd_threads_alive", {}) == 3);
    CHECK(e.value("kiqd_redis_up", {}) == 1);
    CHECK(e.value("kiqd_queue_size", {{"queue", "urgent"}}) == 0);
    CHECK(e.value("kiqd_cpu_bound_running", {}) == 0);
    CHECK(e.value("kiqd_job_cpu_seconds_total", {{"class", "Test::Burn"}}) >= 0.2);
    CHECK(e.value("kiqd_job_cpu_seconds_total", record) < 0.2);
    CHECK(check_histograms(e) >= 4);

    // The job log lines carry the metadata and the SLO verdict.
    REQUIRE(p.wait_for_output("slo=missed(scheduling)"));
    CHECK_THAT(p.output(), Catch::Contains("urgency=high resource_boundary=cpu "
                                           "feature_category=testing"));

    // The server thread ends with the process.
    CHECK(p.stop() == 0);
    CHECK(http_get(port, "/healthz").first == 0);
}

TEST_CASE("metrics: queue size and latency from Redis; /healthz is 503 without Redis",
          "[metrics]") {
    RedisServer server;
    auto c = server.connect();
    const int port = kiqd::test::free_port();
    KiqdProcess p(KIQD_TEST_DAEMON,
                  kiqd::test::kiqd_config(server,
                                          "queues: [idle, waiting]\nmetrics: {listen: "
                                          "\"127.0.0.1:" +
                                              std::to_string(port) + "\"}\n"));
    REQUIRE(wait_until([&] { return http_get(port, "/healthz").first == 200; }));
    // Quiet: threads stop fetching (the process then reports "quiet", still healthy).
    p.signal(SIGTSTP);
    REQUIRE(wait_until([&] { return http_get(port, "/healthz").second == "quiet\n"; }));
    // Threads leave their loop after their last fetch (up to 2 s): then nothing pops the jobs.
    REQUIRE(wait_until([&] {
        auto [status, body] = http_get(port, "/metrics");
        return status == 200 && parse_prometheus(body).value("kiqd_threads_alive", {}) == 0;
    }));
    const double now = kiqd::epoch_seconds();
    push_job(c, "Test::Record", "waiting", now - 42);
    push_job(c, "Test::Record", "waiting", now);
    auto [status, body] = http_get(port, "/metrics");
    REQUIRE(status == 200);
    auto e = parse_prometheus(body);
    CHECK(e.value("kiqd_queue_size", {{"queue", "waiting"}}) == 2);
    CHECK(e.value("kiqd_queue_size", {{"queue", "idle"}}) == 0);
    const double latency = e.value("kiqd_queue_latency_seconds", {{"queue", "waiting"}});
    CHECK(latency >= 42);
    CHECK(latency < 42 + 600);  // the oldest job's age, not an epoch timestamp
    CHECK(e.value("kiqd_queue_latency_seconds", {{"queue", "idle"}}) == 0);

    server.stop();
    auto down = http_get(port, "/healthz");
    CHECK(down.first == 503);
    CHECK_THAT(down.second, Catch::Contains("redis unreachable"));
    auto m = http_get(port, "/metrics");
    REQUIRE(m.first == 200);  // the job series are in memory; Redis being down is a gauge
    CHECK(parse_prometheus(m.second).value("kiqd_redis_up", {}) == 0);
    server.start();
    CHECK(p.stop() == 0);
}

TEST_CASE("selector: a --selector process serves only the queues of matching workers",
          "[selector][metadata]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto c = server.connect();
    const std::string yaml = kiqd::test::kiqd_config(server, R"(
queues: [[urgent, 3], [default, 1]]
concurrency: 2
routing_rules:
  - ["resource_boundary=memory", memory_bound]
handlers:
  Test::Record:
    queue: urgent
    urgency: high
  Test::FailOnce:
    queue: slow
    urgency: throttled
  Memory::Hog:
    resource_boundary: memory
)");
    // No worker matches, or a bad query: exit 78 naming --selector.
    {
        KiqdProcess bad(KIQD_TEST_DAEMON, yaml, {"--selector", "feature_category=none"});
        CHECK(bad.wait_exit() == 78);
        CHECK_THAT(bad.output(), Catch::Contains("--selector: 'feature_category=none' matches no "
                                                 "declared worker"));
    }
    {
        KiqdProcess bad(KIQD_TEST_DAEMON, yaml, {"--selector", "urgency=urgent"});
        CHECK(bad.wait_exit() == 78);
        CHECK_THAT(bad.output(), Catch::Contains("--selector: 'urgency=urgent': urgency must be"));
    }

    KiqdProcess p(KIQD_TEST_DAEMON, yaml,
                  {"--selector", "urgency=high|urgency=throttled&resource_boundary!=memory"});
    // check-config shows what a selector picks.
    auto [code, out] = kiqd::test::check_config(KIQD_TEST_DAEMON, yaml,
                                                {"--selector", "resource_boundary=memory"});
    CHECK(code == 0);
    CHECK_THAT(out, Catch::Contains("1 queue(s) (memory_bound)"));
    const auto info = only_process_info(c);
    // Classes in name order: Test::FailOnce → slow, Test::Record → urgent (weight from queues:).
    CHECK(info["queues"] == nlohmann::json::array({"slow", "urgent"}));
    const double now = kiqd::epoch_seconds();
    push_job(c, "Test::Record", "urgent", now);
    push_job(c, "Test::Record", "memory_bound", now);
    push_job(c, "Test::Record", "default", now);
    REQUIRE(wait_until([&] { return ran_records(c).size() == 1; }));
    CHECK(ran_records(c)[0]["queue"] == "urgent");
    // The others stay where they are (the process does not listen there).
    CHECK(llen(c, "queue:memory_bound") == 1);
    CHECK(llen(c, "queue:default") == 1);
    CHECK(p.stop() == 0);
    CHECK(ran_records(c).size() == 1);
}

TEST_CASE("selector: of 500 declared workers' queues, a process serves the 250 it selects",
          "[selector][metadata][many_queues]") {
    const bool batched = GENERATE(false, true);
    auto& server = RedisServer::shared();
    server.flushall();
    auto c = server.connect();
    // Worker W<i> on queue q<i>: urgency high for even i, low for odd.
    std::string handlers = "handlers:\n  Test::Record: {queue: q0, urgency: high}\n";
    for (int i = 0; i < 500; ++i)
        handlers += "  W" + std::to_string(i) + ": {queue: q" + std::to_string(i) +
                    ", urgency: " + (i % 2 ? "low" : "high") + "}\n";
    const std::string yaml = kiqd::test::kiqd_config(
        server,
        "concurrency: 4\n" +
            std::string(batched ? "fetch: reliable\nreliable_fetch: {batch_size: 50}\n" : "") +
            handlers);
    KiqdProcess p(KIQD_TEST_DAEMON, yaml, {"--selector", "urgency=high"});
    CHECK(only_process_info(c)["queues"].size() == 250);
    const double now = kiqd::epoch_seconds();
    for (const char* q : {"q498", "q0", "q250", "q1", "q499"}) push_job(c, "Test::Record", q, now);
    REQUIRE(wait_until([&] { return ran_records(c).size() == 3; }));
    std::multiset<std::string> ran;
    for (const auto& r : ran_records(c)) ran.insert(r["queue"].get<std::string>());
    CHECK(ran == std::multiset<std::string>{"q0", "q250", "q498"});
    // The unselected queues keep their jobs.
    CHECK(llen(c, "queue:q1") == 1);
    CHECK(llen(c, "queue:q499") == 1);
    CHECK(p.stop() == 0);
    CHECK(ran_records(c).size() == 3);
}

TEST_CASE("cpu cap: at most cpu_bound_concurrency cpu-bound jobs at once, others keep running",
          "[cpu][metadata]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto c = server.connect();
    const auto mode = GENERATE(std::string("basic"), std::string("reliable"));
    INFO("fetch: " << mode);
    KiqdProcess p(KIQD_TEST_DAEMON, kiqd::test::kiqd_config(server,
                                                            "queues: [default]\n"
                                                            "concurrency: 6\n"
                                                            "cpu_bound_concurrency: 2\n"
                                                            "fetch: " +
                                                                mode + R"(
handlers:
  Test::Record:
    resource_boundary: cpu
)"));
    const double now = kiqd::epoch_seconds();
    // Eight cpu-bound jobs of 0.3 s first, then four others: FIFO puts the others behind them.
    for (int i = 0; i < 8; ++i) push_job(c, "Test::Record", "default", now, {0.3});
    for (int i = 0; i < 4; ++i) push_job(c, "Test::RecordOther", "default", now, {0.3});
    REQUIRE(wait_until([&] { return ran_records(c).size() == 12; }, std::chrono::seconds(30)));
    auto jobs = ran_records(c);
    std::vector<std::pair<double, int>> events;  // (time, +1 start / -1 end) of cpu jobs
    double last_cpu_start = 0, first_other_start = 1e300, last_other_start = 0;
    for (const auto& j : jobs) {
        const double s = j["started"], e = j["ended"];
        if (j["class"] == "Test::Record") {
            events.push_back({s, +1});
            events.push_back({e, -1});
            last_cpu_start = std::max(last_cpu_start, s);
        } else {
            first_other_start = std::min(first_other_start, s);
            last_other_start = std::max(last_other_start, s);
        }
    }
    std::sort(events.begin(), events.end());  // an end sorts before a start at the same time
    int running = 0, peak = 0;
    for (const auto& [t, d] : events) peak = std::max(peak, running += d);
    CHECK(peak == 2);  // the cap holds, and is used
    // The other jobs did not wait for the cpu-bound backlog: they all started before the last
    // cpu-bound job did (that one waited for three rounds of two).
    CHECK(last_other_start < last_cpu_start);
    CHECK_THAT(p.output(), Catch::Contains("cpu-bound jobs: at most 2 at once"));
    CHECK(p.stop() == 0);
}

TEST_CASE("cpu cap: held cpu-bound jobs go back to their queue at shutdown", "[cpu][metadata]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto c = server.connect();
    const auto mode = GENERATE(std::string("basic"), std::string("reliable"));
    INFO("fetch: " << mode);
    KiqdProcess p(KIQD_TEST_DAEMON,
                  kiqd::test::kiqd_config(server,
                                          "queues: [default]\nconcurrency: 4\n"
                                          "cpu_bound_concurrency: 1\ntimeout: 1\nfetch: " +
                                              mode + R"(
handlers:
  Test::Record:
    resource_boundary: cpu
)"));
    const double now = kiqd::epoch_seconds();
    for (int i = 0; i < 5; ++i) push_job(c, "Test::Record", "default", now, {5});
    // One runs (5 s, longer than the 1 s shutdown timeout), the others are fetched and held.
    REQUIRE(wait_until([&] { return llen(c, "queue:default") == 0; }));
    CHECK(p.stop() == 0);
    // Nothing lost, nothing ran twice: every job is back in the queue or ran.
    const auto back = llen(c, "queue:default");
    CHECK(back + static_cast<long long>(ran_records(c).size()) == 5);
    CHECK(back >= 4);
    if (mode == "reliable") {
        auto lists = c.command({"KEYS", "*working*"});
        for (size_t i = 0; i < lists.size(); ++i)
            CHECK(c.command({"TYPE", std::string(lists[i].str())}).str() != "list");
    }
}
