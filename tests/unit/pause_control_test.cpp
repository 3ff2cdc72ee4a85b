// Pause control without Redis: the `pause_control:` keys, strategies resolved against the
// registry (unknown names and bad options are exit-78 errors naming the key), GitLab's worker
// key names, and the queue order leaving paused queues out.
#include "middleware/pause/pause_control.hpp"

#include <catch2/catch.hpp>
#include <map>

#include "fetch/queue_order.hpp"
#include "kiqd/config.hpp"
#include "kiqd/pause_strategy.hpp"
#include "support/config_errors.hpp"

using namespace kiqd;

namespace {

std::string pause_error_of(const std::string& yaml) {
    return kiqd::test::config_error_of(
        yaml, [](Config& c) { PauseStrategies strategies(c, PauseStrategyRegistry{}); });
}

struct AlwaysPaused final : PauseStrategy {
    bool should_pause(redis::Connection&) const override { return true; }
    std::string descriptor() const override { return "custom:always"; }
};

}  // namespace

TEST_CASE("pause_control: settings and per-class strategies", "[pause][config]") {
    auto c = parse_config(R"(
pause_control:
  refresh_interval: 0.25
  resume_interval: 2
  batch_size: 50
handlers:
  SearchJob: {pause_control: manual}
  IndexJob:
    pause_control: {strategy: redis_flag, key: "search:maintenance"}
  Other: {pause_control: none}
)",
                          "test.yml", "");
    CHECK(c.pause_control.refresh_interval == std::chrono::milliseconds(250));
    CHECK(c.pause_control.resume_interval == std::chrono::milliseconds(2000));
    CHECK(c.pause_control.batch_size == 50);
    PauseStrategyRegistry registry;
    registry.declare("Other", "manual");  // the YAML's `none` takes it back
    PauseStrategies strategies(c, registry);
    REQUIRE(strategies.find("SearchJob"));
    CHECK(strategies.find("SearchJob")->descriptor() == "manual");
    REQUIRE(strategies.find("IndexJob"));
    CHECK(strategies.find("IndexJob")->descriptor() == "redis_flag:search:maintenance");
    CHECK(strategies.find("Other") == nullptr);
    CHECK(strategies.find("Unknown") == nullptr);
}

TEST_CASE("pause_control: defaults, and custom strategies from C++", "[pause][config]") {
    auto c =
        parse_config("handlers: {Reindex: {pause_control: {strategy: cluster}}}\n", "test.yml", "");
    CHECK(c.pause_control.refresh_interval == std::chrono::milliseconds(500));
    CHECK(c.pause_control.resume_interval == std::chrono::milliseconds(5000));
    CHECK(c.pause_control.batch_size == 1000);
    PauseStrategyRegistry registry;
    registry.add("cluster", [](const std::string&, const YAML::Node&) {
        return std::make_shared<AlwaysPaused>();
    });
    registry.declare("FromCpp", "cluster");
    PauseStrategies strategies(c, registry);
    REQUIRE(strategies.find("Reindex"));
    CHECK(strategies.find("Reindex")->descriptor() == "custom:always");
    CHECK(strategies.find("FromCpp"));
}

TEST_CASE("pause_control: bad values name the key", "[pause][config]") {
    CHECK_THAT(pause_error_of("handlers: {A: {pause_control: nope}}\n"),
               Catch::Contains("handlers.A.pause_control") &&
                   Catch::Contains("unknown strategy \"nope\"") && Catch::Contains("redis_flag"));
    CHECK_THAT(pause_error_of("handlers: {A: {pause_control: redis_flag}}\n"),
               Catch::Contains("handlers.A.pause_control") && Catch::Contains("key"));
    CHECK_THAT(pause_error_of("handlers: {A: {pause_control: {key: x}}}\n"),
               Catch::Contains("handlers.A.pause_control.strategy") && Catch::Contains("required"));
    CHECK_THAT(pause_error_of("handlers: {A: {pause_control: [manual]}}\n"),
               Catch::Contains("handlers.A.pause_control"));
    CHECK_THAT(
        pause_error_of("pause_control: {refresh_interval: 2}\n"),
        Catch::Contains("pause_control.refresh_interval") && Catch::Contains("at most 1 second"));
    CHECK_THAT(pause_error_of("pause_control: {resume_interval: 0}\n"),
               Catch::Contains("pause_control.resume_interval"));
    CHECK_THAT(pause_error_of("pause_control: {batch_size: 0}\n"),
               Catch::Contains("pause_control.batch_size"));
    CHECK_THAT(pause_error_of("pause_control: {batch: 10}\n"),
               Catch::Contains("pause_control.batch") && Catch::Contains("unknown key"));
    CHECK(pause_error_of("handlers: {A: {pause_control: manual}}\n").empty());
}

TEST_CASE("parked-jobs keys use ActiveSupport's underscore, as GitLab does", "[pause]") {
    CHECK(pause_control_worker_name("Elastic::IndexWorker") == "elastic/index_worker");
    CHECK(pause_control_worker_name("HTTPServerJob") == "http_server_job");
    CHECK(pause_control_worker_name("Zoekt::IndexingTaskWorker") == "zoekt/indexing_task_worker");
    CHECK(pause_control_worker_name("Job2Go") == "job2_go");
    CHECK(pause_control_worker_name("simple") == "simple");
    Keys keys("ns");
    CHECK(keys.parked_jobs("elastic/index_worker") ==
          "ns:sidekiq:pause_control:paused_jobs:zset:{elastic/index_worker}");
    CHECK(keys.parked_score("a") == "ns:sidekiq:pause_control:paused_jobs:score:{a}");
}

TEST_CASE("paused queues are left out of strict and weighted orders", "[pause][fetch]") {
    std::mt19937_64 rng(7);
    std::vector<const std::string*> out;
    QueueOrder strict({{"critical", 0}, {"default", 0}, {"low", 0}});
    strict.set_paused({"default", "not-configured"});
    strict.order(rng, out);
    REQUIRE(out.size() == 2);
    CHECK(*out[0] == "critical");
    CHECK(*out[1] == "low");

    QueueOrder weighted({{"critical", 6}, {"default", 3}, {"low", 1}});
    weighted.set_paused({"critical"});
    std::map<std::string, int> first;
    const int n = 10000;
    for (int i = 0; i < n; ++i) {
        weighted.order(rng, out);
        REQUIRE(out.size() == 2);
        for (const auto* q : out) REQUIRE(*q != "critical");
        ++first[*out[0]];
    }
    // The remaining queues keep their relative weights: 3:1 → 75 % first.
    CHECK(first["default"] > n * 0.72);
    CHECK(first["default"] < n * 0.78);

    weighted.set_paused({"critical", "default", "low"});
    weighted.order(rng, out);
    CHECK(out.empty());
    weighted.set_paused({});
    weighted.order(rng, out);
    CHECK(out.size() == 3);
}

TEST_CASE("PauseState: nothing paused is the fast path; updates report changes", "[pause]") {
    PauseState state;
    CHECK_FALSE(state.anything_paused());
    CHECK_FALSE(state.update({}));
    CHECK(state.update({{"SearchJob"}, {}}));
    CHECK(state.anything_paused());
    CHECK(state.current()->workers.count("SearchJob"));
    CHECK_FALSE(state.update({{"SearchJob"}, {}}));
    CHECK(state.update({{}, {"low"}}));
    CHECK(state.current()->queues.count("low"));
    CHECK(state.update({}));
    CHECK_FALSE(state.anything_paused());
}
