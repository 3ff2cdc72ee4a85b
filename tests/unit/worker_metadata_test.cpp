// Worker metadata in `handlers:` (validation, exit-78 messages), the selector syntax, routing
// rules and `--selector` queue selection (WorkerCatalog).
#include <catch2/catch.hpp>

#include "config/worker_catalog.hpp"
#include "kiqd/client.hpp"
#include "kiqd/config.hpp"
#include "kiqd/worker_selector.hpp"
#include "middleware/job_metrics.hpp"
#include "support/config_errors.hpp"

using kiqd::ConfigError;
using kiqd::JobMetrics;
using kiqd::parse_config;
using kiqd::ResourceBoundary;
using kiqd::Urgency;
using kiqd::WorkerMetadata;
using kiqd::WorkerSelector;

using kiqd::test::config_error_of;
namespace {

std::string selector_error(const std::string& query) {
    try {
        WorkerSelector::parse(query);
        return "";
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
}

bool match(const std::string& query, const std::string& cls, const std::string& queue,
           const WorkerMetadata& md) {
    return WorkerSelector::parse(query).matches({cls, queue, md});
}

}  // namespace

TEST_CASE("handlers: worker metadata keys", "[config][metadata]") {
    auto c = parse_config(R"(
queues: [default]
handlers:
  SearchIndexer:
    queue: search
    urgency: high
    resource_boundary: cpu
    feature_category: global_search
    external_dependencies: false
    idempotent: true
    tags: [search, elastic]
  Exporter:
    urgency: :throttled
    resource_boundary: memory
    external_dependencies: true
  Plain:
    lock: until_executed
)",
                          "test.yml", "development");
    const auto& s = c.classes.at("SearchIndexer");
    CHECK(s.queue == "search");
    CHECK(s.metadata.declared);
    CHECK(s.metadata.urgency == Urgency::high);
    CHECK(s.metadata.resource_boundary == ResourceBoundary::cpu);
    CHECK(s.metadata.feature_category == "global_search");
    CHECK_FALSE(s.metadata.external_dependencies);
    CHECK(s.metadata.idempotent);
    CHECK(s.metadata.tags == std::vector<std::string>{"search", "elastic"});
    const auto& e = c.classes.at("Exporter");
    CHECK(e.metadata.urgency == Urgency::throttled);
    CHECK(e.metadata.resource_boundary == ResourceBoundary::memory);
    CHECK(e.metadata.external_dependencies);
    const auto& p = c.classes.at("Plain");
    CHECK_FALSE(p.metadata.declared);
    CHECK(p.metadata.urgency == Urgency::low);  // GitLab's defaults
    CHECK(p.metadata.resource_boundary == ResourceBoundary::unknown);
    CHECK(p.queue.empty());
}

TEST_CASE("handlers: metadata validation names the key and line", "[config][metadata]") {
    CHECK(config_error_of("handlers:\n  A:\n    urgency: high\n    resource_boundary: memory\n") ==
          "handlers.A.resource_boundary (line 2): a high-urgency worker cannot be memory-bound "
          "(use urgency: low or throttled, or resource_boundary: cpu/unknown)");
    CHECK(
        config_error_of("handlers:\n  A:\n    external_dependencies: true\n    urgency: high\n") ==
        "handlers.A.external_dependencies (line 2): a high-urgency worker cannot have "
        "external dependencies (use urgency: low or throttled)");
    CHECK(config_error_of("handlers:\n  A:\n    urgency: urgent\n") ==
          "handlers.A.urgency (line 3): must be high, low or throttled, not 'urgent'");
    CHECK(config_error_of("handlers:\n  A:\n    resource_boundary: gpu\n") ==
          "handlers.A.resource_boundary (line 3): must be cpu, memory or unknown, not 'gpu'");
    CHECK(config_error_of("handlers:\n  A:\n    idempotent: maybe\n") ==
          "handlers.A.idempotent (line 3): must be true or false, not 'maybe'");
    CHECK(config_error_of("handlers:\n  A:\n    tags: search\n") ==
          "handlers.A.tags (line 3): must be a list of names");
    CHECK(config_error_of("handlers:\n  A:\n    tags: [a&b]\n") ==
          "handlers.A.tags (line 3): tag 'a&b': letters, digits, _ - . / only");
    CHECK(config_error_of("handlers:\n  A:\n    feature_category: a,b\n") ==
          "handlers.A.feature_category (line 3): must be a name of letters, digits, _ - . / (not "
          "'a,b')");
    CHECK(config_error_of("handlers:\n  A:\n    queue: 'bad queue'\n") ==
          "handlers.A.queue (line 3): invalid queue name 'bad queue' (letters, digits, _ : . - "
          "only)");
    CHECK(config_error_of("handlers:\n  A:\n    queue: ''\n") ==
          "handlers.A.queue (line 3): is empty");
    // Allowed: high + cpu, throttled + memory + external dependencies.
    CHECK(config_error_of("handlers:\n  A:\n    urgency: high\n    resource_boundary: cpu\n")
              .empty());
    CHECK(config_error_of("handlers:\n  A:\n    urgency: throttled\n    resource_boundary: memory\n"
                          "    external_dependencies: true\n")
              .empty());
}

TEST_CASE("routing_rules, metrics, selector, cpu_bound_concurrency keys", "[config][metadata]") {
    auto c = parse_config(R"(
routing_rules:
  - ["urgency=high", urgent]
  - ["resource_boundary=cpu", cpu_bound]
  - ["feature_category=pages", null]
  - ["*", default]
metrics:
  listen: "127.0.0.1:9394"
selector: "urgency=high"
cpu_bound_concurrency: 3
job_metadata: false
)",
                          "test.yml", "development");
    REQUIRE(c.routing_rules.size() == 4);
    CHECK(c.routing_rules[0].queue == "urgent");
    CHECK(c.routing_rules[2].queue.empty());
    CHECK(c.routing_rules[3].line == 6);
    CHECK(c.metrics.host == "127.0.0.1");
    CHECK(c.metrics.port == 9394);
    CHECK(c.selector == "urgency=high");
    CHECK(c.cpu_bound_concurrency == 3);
    CHECK_FALSE(c.job_metadata);

    CHECK(config_error_of("routing_rules: [[\"urgency=hi\", q]]\n") ==
          "routing_rules[0] (line 1): 'urgency=hi': urgency must be high, low or throttled, not "
          "'hi'");
    CHECK(config_error_of("routing_rules: [[\"*\"]]\n") ==
          "routing_rules[0] (line 1): must be a [query, queue] pair");
    CHECK(config_error_of("metrics: {listen: localhost}\n") ==
          "metrics.listen (line 1): must be host:port, e.g. 127.0.0.1:9394, not 'localhost'");
    CHECK(config_error_of("metrics: {listen: \"127.0.0.1:99999\"}\n") ==
          "metrics.listen (line 1): port must be at most 65535");
    CHECK(config_error_of("metrics: {port: 1}\n") == "metrics.port (line 1): unknown key");
    CHECK(config_error_of("selector: \"urgency\"\n") ==
          "selector (line 1): 'urgency': expected attribute=value or attribute!=value");
    CHECK(config_error_of("cpu_bound_concurrency: 0\n") ==
          "cpu_bound_concurrency (line 1): must be between 1 and 1000");

    kiqd::Config defaults;
    defaults.queues = {{"default", 0}};
    kiqd::validate_config(defaults);
    CHECK(defaults.cpu_bound_concurrency >= 1);  // the number of cores
    CHECK(defaults.job_metadata);
    CHECK(defaults.metrics.listen.empty());  // metrics are off by default
}

TEST_CASE("selector parsing errors", "[selector]") {
    CHECK(selector_error("").find("empty") != std::string::npos);
    CHECK(selector_error("urgency=high&") == "empty term in 'urgency=high&' (a stray '&' or '|'?)");
    CHECK(selector_error("|urgency=high") == "empty term in '|urgency=high' (a stray '&' or '|'?)");
    CHECK(selector_error("colour=red").find("unknown attribute 'colour'") != std::string::npos);
    CHECK(selector_error("urgency=high,") == "'urgency=high,': empty value");
    CHECK(selector_error("resource_boundary=gpu") ==
          "'resource_boundary=gpu': resource_boundary must be cpu, memory or unknown, not 'gpu'");
    CHECK(selector_error("has_external_dependencies=yes") ==
          "'has_external_dependencies=yes': has_external_dependencies must be true or false, not "
          "'yes'");
    CHECK(selector_error("urgency=high=low") ==
          "'urgency=high=low': 'high=low' is not a value (a missing '&'?)");
    CHECK(selector_error(" urgency = high , low & resource_boundary != memory | * ").empty());
}

TEST_CASE("selector matching: = != , & | * and tags", "[selector]") {
    WorkerMetadata high_cpu;
    high_cpu.urgency = Urgency::high;
    high_cpu.resource_boundary = ResourceBoundary::cpu;
    high_cpu.feature_category = "search";
    high_cpu.tags = {"elastic", "fast"};
    WorkerMetadata low_mem;
    low_mem.resource_boundary = ResourceBoundary::memory;
    low_mem.external_dependencies = true;
    low_mem.idempotent = true;

    CHECK(match("urgency=high", "A", "q", high_cpu));
    CHECK_FALSE(match("urgency=high", "B", "q", low_mem));
    CHECK(match("urgency!=high", "B", "q", low_mem));
    CHECK(match("urgency=high,low", "B", "q", low_mem));
    CHECK_FALSE(match("urgency!=high,low", "B", "q", low_mem));
    CHECK(match("urgency=high&resource_boundary!=memory", "A", "q", high_cpu));
    CHECK_FALSE(match("urgency=high&resource_boundary!=memory", "B", "q", low_mem));
    // '&' binds tighter than '|': (high & memory) | idempotent=true
    CHECK(match("urgency=high&resource_boundary=memory|idempotent=true", "B", "q", low_mem));
    CHECK_FALSE(match("urgency=high&resource_boundary=memory|idempotent=true", "A", "q", high_cpu));
    CHECK(match("*", "B", "q", low_mem));
    CHECK(match("has_external_dependencies=true", "B", "q", low_mem));
    CHECK(match("has_external_dependencies=false", "A", "q", high_cpu));
    CHECK(match("feature_category=search,pages", "A", "q", high_cpu));
    CHECK_FALSE(match("feature_category=search", "B", "q", low_mem));
    CHECK(match("tags=fast,slow", "A", "q", high_cpu));  // any of the values
    CHECK_FALSE(match("tags!=fast,slow", "A", "q", high_cpu));
    CHECK(match("tags!=fast", "B", "q", low_mem));  // no tags at all
    CHECK(match("worker_name=A,C", "A", "q", high_cpu));
    CHECK(match("name=q", "A", "q", high_cpu));
    CHECK(match("queue_name!=other", "A", "q", high_cpu));
}

TEST_CASE("catalog: YAML over C++ declarations, routing, selection", "[selector][routing]") {
    auto c = parse_config(R"(
queues: [[urgent, 5], [default, 1]]
routing_rules:
  - ["urgency=high", urgent]
  - ["resource_boundary=cpu", cpu_bound]
  - ["feature_category=pages", null]
handlers:
  Fast:
    urgency: high
  Crunch:
    resource_boundary: cpu
  Pages:
    feature_category: pages
    queue: pages_q
  Own:
    queue: own_q
  FromCpp:
    urgency: throttled
  ExecOnly:
    lock: until_executed
)",
                          "test.yml", "development");
    kiqd::HandlerRegistry handlers;
    WorkerMetadata cpp;
    cpp.urgency = Urgency::high;
    cpp.tags = {"cpp"};
    handlers.add(
        "FromCpp", [](const kiqd::Job&, kiqd::JobContext&) {}, cpp, "cpp_q");
    handlers.add(
        "OnlyCpp", [](const kiqd::Job&, kiqd::JobContext&) {}, cpp, "only_cpp");
    kiqd::WorkerCatalog catalog(c, handlers);

    CHECK(catalog.routed_queue("Fast") == "urgent");
    CHECK(catalog.routed_queue("Crunch") == "cpu_bound");
    CHECK(catalog.routed_queue("Pages") == "pages_q");  // null queue: its own
    CHECK(catalog.routed_queue("Own") == "own_q");      // no rule matched
    CHECK(catalog.routed_queue("OnlyCpp") == "urgent");
    CHECK_FALSE(catalog.routed_queue("Undeclared").has_value());
    CHECK(catalog.find("ExecOnly") == nullptr);
    // The YAML metadata replaced the C++ one; the C++ queue stays.
    CHECK(catalog.metadata("FromCpp").urgency == Urgency::throttled);
    CHECK(catalog.metadata("FromCpp").tags.empty());
    CHECK(catalog.find("FromCpp")->queue == "cpp_q");
    CHECK(catalog.metadata("Undeclared").urgency == Urgency::low);
    CHECK(catalog.any_cpu_bound());

    auto picked = catalog.select(WorkerSelector::parse("urgency=high"), c.queues);
    REQUIRE(picked.size() == 1);  // Fast and OnlyCpp share the routed queue
    CHECK(picked[0].name == "urgent");
    CHECK(picked[0].weight == 5);  // from queues:
    picked = catalog.select(WorkerSelector::parse("urgency!=high"), c.queues);
    std::vector<std::string> names;
    for (const auto& q : picked) names.push_back(q.name);
    CHECK(names == std::vector<std::string>{"cpu_bound", "cpp_q", "own_q", "pages_q"});
    CHECK(picked[0].weight == 1);  // not listed in queues:

    c.selector = "feature_category=nothing";
    try {
        kiqd::apply_selector(c, catalog, "--selector");
        FAIL("no error");
    } catch (const ConfigError& e) {
        CHECK(e.key() == "--selector");
        CHECK_THAT(e.what(), Catch::Contains("'feature_category=nothing' matches no declared"));
    }
    c.selector = "resource_boundary=cpu|tags=cpp";
    kiqd::apply_selector(c, catalog, "--selector");
    REQUIRE(c.queues.size() == 2);
    CHECK(c.queues[0].name == "cpu_bound");
    CHECK(c.queues[1].name == "urgent");

    // C++ declarations obey the same rules, checked when the catalog is built (exit 78).
    WorkerMetadata bad;
    bad.urgency = Urgency::high;
    bad.resource_boundary = ResourceBoundary::memory;
    handlers.add(
        "Bad", [](const kiqd::Job&, kiqd::JobContext&) {}, bad);
    CHECK_THROWS_WITH(kiqd::WorkerCatalog(c, handlers),
                      Catch::StartsWith("handler registration Bad.resource_boundary: a "
                                        "high-urgency worker cannot be memory-bound"));
}

TEST_CASE("client: a job pushed without a queue goes to its class's routed queue", "[routing]") {
    kiqd::Client client(kiqd::Keys{}, kiqd::Compat::v6);
    CHECK(client.prepare({{"class", "Fast"}}).queue == "default");  // no router
    auto c = parse_config(
        "routing_rules: [[\"urgency=high\", urgent]]\n"
        "handlers: {Fast: {urgency: high}}\n",
        "test.yml", "development");
    kiqd::HandlerRegistry handlers;
    const kiqd::WorkerCatalog catalog(c, handlers);
    client.set_router([&](const std::string& cls) { return catalog.routed_queue(cls); });
    CHECK(client.prepare({{"class", "Fast"}}).queue == "urgent");
    CHECK(nlohmann::json::parse(client.prepare({{"class", "Fast"}}).payload)["queue"] == "urgent");
    CHECK(client.prepare({{"class", "Other"}}).queue == "default");
    CHECK(client.prepare({{"class", "Fast"}, {"queue", "mine"}}).queue == "mine");  // explicit
}

TEST_CASE("the process client (kiqd enqueue, handlers' follow-ups) applies routing_rules",
          "[routing]") {
    auto c = parse_config(
        "routing_rules: [[\"resource_boundary=cpu\", cpu_bound], [\"*\", null]]\n"
        "handlers: {Crunch: {resource_boundary: cpu}, Own: {queue: own_q}}\n",
        "test.yml", "development");
    const auto client = kiqd::make_process_client(c);
    CHECK(client.prepare({{"class", "Crunch"}}).queue == "cpu_bound");
    CHECK(client.prepare({{"class", "Own"}}).queue == "own_q");        // null queue: its own
    CHECK(client.prepare({{"class", "Unknown"}}).queue == "default");  // nothing declared
    CHECK(client.prepare({{"class", "Crunch"}, {"queue", "x"}}).queue == "x");
    // Without routing_rules the class's own queue still applies.
    auto plain = parse_config("handlers: {Own: {queue: own_q}}\n", "test.yml", "development");
    CHECK(kiqd::make_process_client(plain).prepare({{"class", "Own"}}).queue == "own_q");
}

TEST_CASE(
    "job metrics: a CPU reading is shared by the thread's jobs since the last one, by run time",
    "[metadata]") {
    JobMetrics metrics;
    const std::string a = "A", b = "B", q = "default";
    auto observe = [&](const std::string& cls, double run, std::optional<double> cpu) {
        JobMetrics::Observation o{cls, q, Urgency::low};
        o.run_seconds = run;
        o.cpu_seconds = cpu;
        metrics.record(o);
    };
    observe(a, 1, std::nullopt);
    observe(a, 1, std::nullopt);
    observe(b, 2, std::nullopt);
    observe(b, 4, 0.8);  // spans all four jobs: A ran 2 of 8 s, B 6 of 8
    observe(a, 0, 0.5);  // a span of one job that ran 0 s still gets its reading
    std::string text;
    metrics.render(text);
    auto cpu_of = [&](const std::string& cls) {
        const std::string prefix =
            "kiqd_job_cpu_seconds_total{class=\"" + cls + "\",worker=\"" + cls +
            "\",queue=\"default\",urgency=\"low\"} ";
        const auto at = text.find(prefix);
        REQUIRE(at != std::string::npos);
        return std::stod(text.substr(at + prefix.size()));
    };
    CHECK(cpu_of("A") == Approx(0.2 + 0.5));
    CHECK(cpu_of("B") == Approx(0.6));
}
