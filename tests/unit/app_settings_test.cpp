// adopt_app_declarations: what an app declares in Ruby (as its runner reports it in `ready`)
// merged into kiqd's Config before the daemon is built, kiqd's own config winning where both say.
#include "server/app_settings.hpp"

#include <spdlog/sinks/ostream_sink.h>

#include <catch2/catch.hpp>
#include <sstream>

using kiqd::Config;
using kiqd::runner::AppCapsule;
using kiqd::runner::AppSettings;
using kiqd::runner::AppWorkerClass;

namespace {

struct Logged {
    std::ostringstream out;
    spdlog::logger log{"test", std::make_shared<spdlog::sinks::ostream_sink_mt>(out)};
    Logged() { log.set_pattern("%l %v"); }
};

Config config_with_queues(std::vector<std::string> names) {
    Config c;
    c.queues.clear();
    for (auto& n : names) c.queues.push_back({n, 0});
    c.concurrency = 4;
    return c;
}

}  // namespace

TEST_CASE("app declarations: a capsule joins kiqd's and takes its queues", "[app_settings]") {
    Logged l;
    Config c = config_with_queues({"default", "single"});
    AppSettings app;
    app.capsules.push_back(AppCapsule{"single", 1, {{"single", 0}}});
    kiqd::adopt_app_declarations(c, app, l.log);
    REQUIRE(c.capsules.size() == 1);
    CHECK(c.capsules[0].name == "single");
    CHECK(c.capsules[0].concurrency == 1);
    REQUIRE(c.queues.size() == 1);
    CHECK(c.queues[0].name == "default");
    CHECK(l.out.str().find("capsules from the app's Sidekiq configuration: single "
                           "(concurrency=1, queues single)") != std::string::npos);
    CHECK(l.out.str().find("queues single (capsule single) are listed in kiqd's queues") !=
          std::string::npos);
}

TEST_CASE("app declarations: kiqd's capsule of the same name wins, with a warning",
          "[app_settings]") {
    Logged l;
    Config c = config_with_queues({"default"});
    c.capsules.push_back({"single", {{"single", 0}}, 2, 7});
    AppSettings app;
    app.capsules.push_back(AppCapsule{"single", 1, {{"single", 0}}});
    kiqd::adopt_app_declarations(c, app, l.log);
    REQUIRE(c.capsules.size() == 1);
    CHECK(c.capsules[0].concurrency == 2);
    CHECK(l.out.str().find("warning capsules.single: kiqd's config says concurrency=2 queues "
                           "single and the app's Sidekiq configuration says concurrency=1 "
                           "queues single; kiqd's config wins") != std::string::npos);
}

TEST_CASE("app declarations: capsules that cannot be applied leave the config as it was",
          "[app_settings]") {
    Logged l;
    SECTION("reliable fetch serves one capsule per process") {
        Config c = config_with_queues({"default"});
        c.fetch = kiqd::FetchMode::reliable;
        AppSettings app;
        app.capsules.push_back(AppCapsule{"single", 1, {{"single", 0}}});
        kiqd::adopt_app_declarations(c, app, l.log);
        CHECK(c.capsules.empty());
        CHECK(l.out.str().find("warning the app's capsules single (concurrency=1, queues single) "
                               "are not applied: capsules: need fetch: basic") !=
              std::string::npos);
    }
    SECTION("a capsule taking every queue of kiqd's") {
        Config c = config_with_queues({"single"});
        AppSettings app;
        app.capsules.push_back(AppCapsule{"single", 1, {{"single", 0}}});
        kiqd::adopt_app_declarations(c, app, l.log);
        CHECK(c.capsules.empty());
        REQUIRE(c.queues.size() == 1);
        CHECK(l.out.str().find("would leave kiqd's own queues empty") != std::string::npos);
    }
    SECTION("a concurrency or weight out of range, a bad name") {
        Config c = config_with_queues({"default"});
        AppSettings app;
        app.capsules.push_back(AppCapsule{"big", 5000, {{"big", 0}}});
        app.capsules.push_back(AppCapsule{"heavy", 1, {{"heavy", 5000}}});
        app.capsules.push_back(AppCapsule{"bad name\n", 1, {{"q", 0}}});
        kiqd::adopt_app_declarations(c, app, l.log);
        CHECK(c.capsules.empty());
        CHECK(l.out.str().find("the app's capsule 'big' is not applied: its concurrency 5000") !=
              std::string::npos);
        CHECK(l.out.str().find("queue 'heavy' has the weight 5000") != std::string::npos);
        CHECK(l.out.str().find("is not applied: its name") != std::string::npos);
    }
}

TEST_CASE("app declarations: job classes' queues and worker attributes", "[app_settings]") {
    Logged l;
    Config c = config_with_queues({"default"});
    // kiqd's YAML declares one class itself.
    auto& own = c.classes["OwnJob"];
    own.job_class = "OwnJob";
    own.metadata.urgency = kiqd::Urgency::low;
    own.metadata.declared = true;
    own.queue = "mine";
    AppSettings app;
    AppWorkerClass index{
        "IndexJob",
        "search",
        {{"urgency", "high"}, {"resource_boundary", "cpu"}, {"feature_category", "global_search"}},
        true,
        false,
        std::vector<std::string>{"search"}};
    AppWorkerClass own_app{"OwnJob", "theirs", {{"urgency", "high"}}, {}, {}, {}};
    AppWorkerClass plain{"PlainJob", "mail", {}, {}, {}, {}};
    AppWorkerClass broken{"BadJob", "", {{"urgency", "high"}, {"resource_boundary", "memory"}},
                          {},       {}, {}};
    AppWorkerClass unknown{"OddJob", "", {{"urgency", "sometimes"}}, {}, {}, {}};
    app.classes = {index, own_app, plain, broken, unknown};
    kiqd::adopt_app_declarations(c, app, l.log);

    const auto& i = c.classes.at("IndexJob");
    CHECK(i.queue == "search");
    CHECK(i.metadata.declared);
    CHECK(i.metadata.urgency == kiqd::Urgency::high);
    CHECK(i.metadata.resource_boundary == kiqd::ResourceBoundary::cpu);
    CHECK(i.metadata.feature_category == "global_search");
    CHECK(i.metadata.idempotent);
    CHECK(i.metadata.tags == std::vector<std::string>{"search"});
    CHECK(c.classes.at("PlainJob").queue == "mail");
    CHECK_FALSE(c.classes.at("PlainJob").metadata.declared);
    // kiqd's YAML wins for its own class, and says so.
    CHECK(c.classes.at("OwnJob").queue == "mine");
    CHECK(c.classes.at("OwnJob").metadata.urgency == kiqd::Urgency::low);
    const std::string log = l.out.str();
    CHECK(log.find("handlers.OwnJob: kiqd's config says urgency=low resource_boundary=unknown "
                   "and the app's class says urgency=high resource_boundary=unknown; kiqd's "
                   "config wins") != std::string::npos);
    CHECK(log.find("handlers.OwnJob.queue: kiqd's config says mine and the app's class says "
                   "theirs; kiqd's config wins") != std::string::npos);
    // GitLab's rule (high urgency is not memory-bound) and an unknown urgency: not applied.
    CHECK(c.classes.count("BadJob") == 0);
    CHECK(c.classes.count("OddJob") == 0);
    CHECK(log.find("the worker attributes of the app's class BadJob are not applied") !=
          std::string::npos);
    CHECK(log.find("unknown urgency 'sometimes'") != std::string::npos);
    CHECK(log.find("job classes from the app: 1 with worker attributes, 2 with a queue of their "
                   "own") != std::string::npos);
}

TEST_CASE("app declarations: max_retries and the dead set's limits at start", "[app_settings]") {
    Logged l;
    Config c = config_with_queues({"default"});
    c.dead_max_jobs = 500;
    c.dead_max_jobs_set = true;
    AppSettings app;
    app.max_retries = 3;
    app.dead_max_jobs = 20;
    kiqd::adopt_app_declarations(c, app, l.log);
    CHECK(c.max_retries == 3);
    CHECK(c.dead_max_jobs == 500);
    CHECK(l.out.str().find("max_retries: 3, from the app's Sidekiq configuration") !=
          std::string::npos);
    CHECK(l.out.str().find("dead_max_jobs: kiqd's config says 500 and the app's Sidekiq "
                           "configuration says 20; kiqd's config wins") != std::string::npos);
}

TEST_CASE("app declarations: a gem that changes Sidekiq's fetch is named", "[app_settings]") {
    Logged l;
    Config c = config_with_queues({"default"});
    AppSettings app;
    app.fetch_patches = {{"Sidekiq::BasicFetch", "Sidekiq::Throttled::Patches::BasicFetch",
                          "sidekiq-throttled", true},
                         {"Sidekiq::BasicFetch", "Sidekiq::Throttled::Patches::ThrottledRetriever",
                          "sidekiq-throttled", true},
                         {"Sidekiq::BasicFetch", "SuperFetchLike::Patch", "some-fetch-gem", false}};
    kiqd::adopt_app_declarations(c, app, l.log);
    const std::string log = l.out.str();
    CHECK(log.find("info sidekiq-throttled: its admission check runs in the app's runner") !=
          std::string::npos);
    CHECK(log.find("sidekiq-throttled", log.find("sidekiq-throttled") + 1) == std::string::npos);
    CHECK(log.find("warning the app's gem some-fetch-gem changes Sidekiq's fetch "
                   "(SuperFetchLike::Patch in Sidekiq::BasicFetch); kiqd fetches jobs itself and "
                   "does not run that code") != std::string::npos);
    CHECK_FALSE(c.limit_fetch.enabled);
}

TEST_CASE("app declarations: gitlab-sidekiq-fetcher asks for reliable fetch", "[app_settings]") {
    Logged l;
    AppSettings app;
    app.fetch_patches = {{"fetch", "Sidekiq::ReliableFetch", "gitlab-sidekiq-fetcher", false}};
    CHECK(kiqd::uses_gitlab_fetcher(app));
    SECTION("basic fetch becomes reliable") {
        Config c = config_with_queues({"default"});
        kiqd::adopt_app_declarations(c, app, l.log);
        CHECK(c.fetch == kiqd::FetchMode::reliable);
        CHECK(l.out.str().find("warning gitlab-sidekiq-fetcher: the app sets up reliable fetch, "
                               "so kiqd fetches reliably (fetch: reliable)") != std::string::npos);
    }
    SECTION("a config kiqd cannot fetch reliably with: a start-up error") {
        Config c = config_with_queues({"default"});
        c.prefetch = 10;
        CHECK_THROWS_WITH(kiqd::adopt_app_declarations(c, app, l.log),
                          "fetch: the app sets up gitlab-sidekiq-fetcher's reliable fetch, and "
                          "kiqd's config has prefetch: 10, which kiqd cannot fetch reliably with: "
                          "remove it, or stop setting up the gem");
    }
}

TEST_CASE("app declarations: sidekiq-limit_fetch turns kiqd's limit fetch on", "[app_settings]") {
    Logged l;
    AppSettings app;
    app.fetch_patches = {
        {"Sidekiq::Manager", "Sidekiq::Manager::InitLimitFetch", "sidekiq-limit_fetch", false}};
    SECTION("with basic fetch") {
        Config c = config_with_queues({"default"});
        kiqd::adopt_app_declarations(c, app, l.log);
        CHECK(c.limit_fetch.enabled);
        CHECK(l.out.str().find("info sidekiq-limit_fetch: kiqd fetches with its queue limits") !=
              std::string::npos);
    }
    SECTION("not with reliable fetch: a warning") {
        Config c = config_with_queues({"default"});
        c.fetch = kiqd::FetchMode::reliable;
        kiqd::adopt_app_declarations(c, app, l.log);
        CHECK_FALSE(c.limit_fetch.enabled);
        CHECK(l.out.str().find("warning sidekiq-limit_fetch: the app uses it, and kiqd cannot "
                               "fetch with its limits: the app's sidekiq-limit_fetch: ") !=
              std::string::npos);
    }
}
