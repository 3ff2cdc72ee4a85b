// Sidekiq 8's wire format (docs/data-model.md#sidekiq-8-checked-against-its-source): payloads and
// records shaped exactly as Sidekiq 8.0 writes them — integer-millisecond created_at /
// enqueued_at / failed_at / retried_at, the Sidekiq::ActiveJob::Wrapper class, the info JSON of
// Launcher#to_data with its capsules — read and written by kiqd in compat 8.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <set>

#include "fetch/queue_order.hpp"
#include "job/job_retry.hpp"
#include "server/process_identity.hpp"
#include "support/job_of.hpp"

using namespace kiqd;
using kiqd::test::job_of;

namespace {

// As Sidekiq 8.0's client pushes a job (Client#normalize_item, #atomic_push): created_at and
// enqueued_at in integer epoch ms.
const char* kPushed8 =
    R"({"retry":true,"queue":"default","args":[1,"two"],"class":"HardJob",)"
    R"("jid":"b4a3f1c2d5e6f7a8b9c0d1e2","created_at":1795312800123,"enqueued_at":1795312800125})";

// The same job after its first failure under Sidekiq 8 (JobRetry#process_retry): failed_at in ms.
const char* kFailedOnce8 =
    R"({"retry":true,"queue":"default","args":[1,"two"],"class":"HardJob",)"
    R"("jid":"b4a3f1c2d5e6f7a8b9c0d1e2","created_at":1795312800123,"enqueued_at":1795312830000,)"
    R"("error_message":"boom","error_class":"RuntimeError","failed_at":1795312800200,)"
    R"("retry_count":0,"retry_for":3600})";

// An Active Job as Sidekiq 8's adapter pushes it.
const char* kActiveJob8 =
    R"({"class":"Sidekiq::ActiveJob::Wrapper","wrapped":"ReportJob","queue":"default",)"
    R"("args":[{"job_class":"ReportJob","job_id":"7b1c","provider_job_id":null,"queue_name":)"
    R"("default","priority":null,"arguments":[42],"executions":0,"exception_executions":{},)"
    R"("locale":"en","timezone":"UTC","enqueued_at":"2026-11-26T10:00:00.123456789Z",)"
    R"("scheduled_at":null}],"retry":true,"jid":"0a1b2c3d4e5f60718293a4b5",)"
    R"("created_at":1795312800123,"enqueued_at":1795312800124})";

struct Retry8 {
    Keys keys;
    DeadSet dead{keys, 10000, 15552000, Compat::v8};
    JobRetry retry{Compat::v8, 25, keys, dead};
    std::mt19937_64 rng{8};
    Failure failure{"RuntimeError", "boom again", {}};
};

}  // namespace

TEST_CASE("sidekiq 8: a pushed job's ms timestamps read as seconds", "[sidekiq8]") {
    const Job job = job_of(kPushed8);
    REQUIRE(job.enqueued_at());
    CHECK(*job.enqueued_at() == Approx(1795312800.125).epsilon(1e-12));
    CHECK(job.handler_name() == "HardJob");
    // 8's Active Job wrapper dispatches on `wrapped`, as the 6/7 wrapper does.
    const Job aj = job_of(kActiveJob8);
    CHECK(aj.handler_name() == "ReportJob");
    CHECK(*aj.enqueued_at() == Approx(1795312800.124).epsilon(1e-12));
}

TEST_CASE("sidekiq 8: retries write integer ms and keep 8's fields", "[sidekiq8][retry]") {
    Retry8 f;
    // First failure: failed_at in ms, retry_count 0, the score in float seconds.
    const auto first = f.retry.plan(job_of(kPushed8), f.failure, 1795312801.5, f.rng);
    REQUIRE(first.outcome == FailureOutcome::Retried);
    const auto p1 = nlohmann::json::parse(first.payload);
    CHECK(p1["failed_at"].is_number_integer());
    CHECK(p1["failed_at"] == 1795312801500LL);
    CHECK(p1["retry_count"] == 0);
    CHECK(p1["created_at"] == 1795312800123LL);  // the producer's, untouched
    CHECK(first.score >= 1795312801.5 + 15);
    // A later failure of a job 8 failed before: retried_at in ms, failed_at kept.
    const auto again = f.retry.plan(job_of(kFailedOnce8), f.failure, 1795312900.25, f.rng);
    const auto p2 = nlohmann::json::parse(again.payload);
    CHECK(p2["retried_at"] == 1795312900250LL);
    CHECK(p2["failed_at"] == 1795312800200LL);
    CHECK(p2["retry_count"] == 1);
    // retry_for is measured from 8's millisecond failed_at: 3,600 s after it, not before.
    CHECK(again.outcome == FailureOutcome::Retried);
    const auto late = f.retry.plan(job_of(kFailedOnce8), f.failure, 1795312800.2 + 3601, f.rng);
    CHECK(late.outcome == FailureOutcome::Dead);
    // 8 checks retry_for alone: a count past `retry` does not end it while the time lasts.
    std::string counted = kFailedOnce8;
    counted.replace(counted.find("\"retry\":true"), 12, "\"retry\":1");
    CHECK(f.retry.plan(job_of(counted), f.failure, 1795312900.25, f.rng).outcome ==
          FailureOutcome::Retried);
    // Sidekiq 7 stops at the count too.
    Keys keys;
    DeadSet dead7{keys, 10000, 15552000, Compat::v7};
    JobRetry retry7{Compat::v7, 25, keys, dead7};
    CHECK(retry7.plan(job_of(counted), f.failure, 1795312900.25, f.rng).outcome ==
          FailureOutcome::Dead);
}

TEST_CASE("sidekiq 8: the info JSON has Launcher#to_data's fields and capsule modes",
          "[sidekiq8][heartbeat]") {
    Config config;
    config.compat = Compat::v8;
    config.compat_auto = false;
    config.concurrency = 5;
    config.tag = "app";
    // Sidekiq 8.0.8's to_data, key by key.
    const std::set<std::string> keys8{"hostname",    "started_at", "pid",     "tag",
                                      "concurrency", "capsules",   "queues",  "weights",
                                      "labels",      "identity",   "version", "embedded"};
    const auto me = ProcessIdentity::create();
    struct Case {
        std::vector<QueueWeight> queues;
        std::string mode;
    };
    auto names_of = [](const nlohmann::json& object) {
        std::set<std::string> names;
        for (const auto& [k, v] : object.items()) names.insert(k);
        return names;
    };
    for (const auto& c : std::vector<Case>{{{{"critical", 0}, {"default", 0}}, "strict"},
                                           {{{"critical", 1}, {"default", 1}}, "random"},
                                           {{{"critical", 3}, {"default", 1}}, "weighted"}}) {
        config.queues = c.queues;
        const auto info = nlohmann::json::parse(me.info_json(config, QueueOrder(config.queues)));
        CHECK(names_of(info) == keys8);
        CHECK(info["started_at"].is_number_float());
        CHECK(info["concurrency"] == 5);
        CHECK(info["queues"] == nlohmann::json::array({"critical", "default"}));
        const auto w =
            nlohmann::json{{"critical", c.queues[0].weight}, {"default", c.queues[1].weight}};
        CHECK(info["weights"] == nlohmann::json::array({w}));
        CHECK(info["capsules"] ==
              nlohmann::json{{"default", {{"concurrency", 5}, {"mode", c.mode}, {"weights", w}}}});
        CHECK(info["embedded"] == false);
        CHECK(info["version"].get<std::string>().rfind("kiqd-", 0) == 0);
    }
    // compat: auto writes the same fields (6.4's readers ignore the extra ones); compat 6 only
    // 6.4.1's eight.
    config.compat = Compat::v6;
    config.compat_auto = true;
    auto field_names = [&] {
        return names_of(nlohmann::json::parse(me.info_json(config, QueueOrder(config.queues))));
    };
    CHECK(field_names() == keys8);
    config.compat_auto = false;
    const auto got = field_names();
    CHECK(got == std::set<std::string>{"hostname", "started_at", "pid", "tag", "concurrency",
                                       "queues", "labels", "identity"});
}
