// What an exec handler's command inherits of kiqd's environment: everything except what is
// kiqd's alone (its Redis URL and passwords wherever they came from, systemd's notify socket,
// the per-job KIQD_* variables).
#include "handlers/child_environment.hpp"

#include <catch2/catch.hpp>

namespace {

std::vector<std::string> filtered(std::vector<std::string> env,
                                  const std::vector<std::string>& secrets) {
    std::vector<char*> environ_like;
    for (auto& e : env) environ_like.push_back(e.data());
    environ_like.push_back(nullptr);
    return kiqd::child_environment(environ_like.data(), secrets);
}

}  // namespace

TEST_CASE("child environment: kiqd's own variables and secrets are withheld", "[exec]") {
    const auto env = filtered(
        {"PATH=/usr/bin:/bin", "HOME=/var/lib/kiqd", "REDIS_URL=redis://127.0.0.1:6379/0",
         "REDIS_PROVIDER=REDISCLOUD_URL", "REDISCLOUD_URL=redis://cloud:6379",
         "NOTIFY_SOCKET=/run/systemd/notify", "WATCHDOG_USEC=30000000", "WATCHDOG_PID=1",
         "KIQD_JID=stale", "KIQD_CLASS=stale", "KIQD_QUEUE=stale", "KIQD_RETRY_COUNT=1",
         "MY_REDIS_PASSWORD=hunter2-long", "ERB_URL=redis://:hunter2-long@host:6379",
         "SENTINEL_PW=sentinel-pw", "NOT_A_PAIR", "DATABASE_URL=postgres://app@db/app", "EMPTY="},
        {"hunter2-long", "sentinel-pw"});
    CHECK(env == std::vector<std::string>{"PATH=/usr/bin:/bin", "HOME=/var/lib/kiqd",
                                          "DATABASE_URL=postgres://app@db/app", "EMPTY="});
}

TEST_CASE("child environment: kiqd_secrets names every password source, never an empty one",
          "[exec]") {
    kiqd::Config c;
    CHECK(kiqd::kiqd_secrets(c).empty());
    c.redis.url = "redis://user:p%40ss@127.0.0.1:6379/0";
    c.redis.endpoint.password = "p@ss";
    c.redis.sentinel.password = "sentinel-secret";
    CHECK(kiqd::kiqd_secrets(c) == std::vector<std::string>{"p@ss", "p%40ss", "sentinel-secret"});
    kiqd::Config from_env;
    from_env.redis.url = "redis://127.0.0.1:6379/0";
    from_env.redis.password = "from-password-env";
    from_env.redis.endpoint.password = "from-password-env";
    CHECK(kiqd::kiqd_secrets(from_env) == std::vector<std::string>{"from-password-env"});
}

namespace {

std::vector<std::string> for_runner(std::vector<std::string> env, const kiqd::Config& config,
                                    const kiqd::RunnerSpec& spec) {
    std::vector<char*> environ_like;
    for (auto& e : env) environ_like.push_back(e.data());
    environ_like.push_back(nullptr);
    return kiqd::runner_environment(environ_like.data(), config, spec);
}

}  // namespace

TEST_CASE("runner environment: the app gets what it would under sidekiq, plus env:", "[runner]") {
    kiqd::Config c;
    c.redis.url = "redis://:hunter2-long@127.0.0.1:6390/0";
    c.redis.password = "hunter2-long";
    kiqd::RunnerSpec spec;
    // kiqd's REDIS_URL and passwords pass (a runner is the application); what belongs to kiqd's
    // own process does not.
    const std::vector<std::string> base{"PATH=/usr/bin:/bin", "REDIS_URL=redis://127.0.0.1:6379/0",
                                        "MY_PW=hunter2-long", "NOTIFY_SOCKET=/run/systemd/notify",
                                        "WATCHDOG_USEC=1",    "WATCHDOG_PID=1",
                                        "KIQD_JID=stale",     "KIQD_RUNNER_FD=9",
                                        "NOT_A_PAIR"};
    CHECK(for_runner(base, c, spec) ==
          std::vector<std::string>{"PATH=/usr/bin:/bin", "REDIS_URL=redis://127.0.0.1:6379/0",
                                   "MY_PW=hunter2-long"});
    // Without REDIS_URL in kiqd's environment: the URL kiqd uses from its config.
    CHECK(
        for_runner({"PATH=/bin"}, c, spec) ==
        std::vector<std::string>{"PATH=/bin", "REDIS_URL=redis://:hunter2-long@127.0.0.1:6390/0"});
    // REDIS_PROVIDER is the app's own way: left as it is.
    CHECK(for_runner({"REDIS_PROVIDER=CLOUD_URL", "CLOUD_URL=redis://c"}, c, spec) ==
          std::vector<std::string>{"REDIS_PROVIDER=CLOUD_URL", "CLOUD_URL=redis://c"});
    // Sentinels: no single URL to give.
    c.redis.sentinel.sentinels.push_back({"127.0.0.1", 26379});
    CHECK(for_runner({"PATH=/bin"}, c, spec) == std::vector<std::string>{"PATH=/bin"});
    // env: adds and overrides.
    spec.env = {{"PATH", "/opt/app/bin"}, {"RAILS_ENV", "production"}};
    CHECK(for_runner({"PATH=/bin", "HOME=/h"}, c, spec) ==
          std::vector<std::string>{"PATH=/opt/app/bin", "HOME=/h", "RAILS_ENV=production"});
}
