#pragma once
// The Ruby application the runner cases run (tests/runners/ruby_app) and the helpers they share:
// its config, its client, and the records its jobs write to its own Redis (app:<list>).
#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/wait_until.hpp"

namespace kiqd::test::runner_app {

using kiqd::test::lrange;
using kiqd::test::RedisServer;
using kiqd::test::run_command;
using kiqd::test::wait_until;

inline const std::string kSource = KIQD_SOURCE_DIR;
inline const std::string kRunner = kSource + "/runners/ruby/kiqd-ruby-runner";
inline const std::string kApp = kSource + "/tests/runners/ruby_app";

inline bool have_ruby_stack() {
    static const bool ok = [] {
        auto [status, out] =
            run_command({"/usr/bin/ruby", "-e", "require 'sidekiq'; require 'active_job'; exit 0"});
        return status == 0;
    }();
    return ok;
}

#define REQUIRE_RUBY_STACK()                                                                  \
    if (!have_ruby_stack()) {                                                                 \
        WARN("skipped: /usr/bin/ruby with ruby-sidekiq and ruby-activejob is not installed"); \
        return;                                                                               \
    }

// Every Ruby case begins so: skipped without Ruby's stack, then the shared server, flushed, and a
// connection to it (`server`, `conn`).
#define RUBY_CASE_BEGIN()                 \
    REQUIRE_RUBY_STACK();                 \
    auto& server = RedisServer::shared(); \
    server.flushall();                    \
    auto conn = server.connect()

// The application's environment: its Redis, and the Sidekiq it loads. KIQD_TEST_RUBYLIB (a
// RUBYLIB, set by the ctest entry that runs these cases on Sidekiq 7.3 from ../shared/gems) puts
// another Sidekiq ahead of Debian's 6.4.1 for the app, the runner kiqd starts, and enqueue.rb.
inline std::map<std::string, std::string> app_env(const RedisServer& server) {
    std::map<std::string, std::string> env{{"APP_REDIS_URL", server.url()}};
    if (const char* lib = std::getenv("KIQD_TEST_RUBYLIB")) env["RUBYLIB"] = lib;
    return env;
}

// kiqd's config with a runner `ruby` for every class ("*"), plus `runner_extra` under it.
inline std::string runner_config(const RedisServer& server, const std::string& runner_extra = "",
                                 const std::string& extra = "") {
    return kiqd::test::default_queue_config(
        server,
        "concurrency: 2\ntimeout: 10\nrunners:\n  ruby:\n    command: [\"/usr/bin/ruby\", \"" +
            kRunner + "\", \"--require\", \"" + kApp + "/app.rb\"]\n    processes: 2\n" +
            runner_extra + "handlers:\n  \"*\": {runner: ruby}\n" + extra);
}

inline std::string one_at_a_time(std::string yaml) {
    yaml.replace(yaml.find("concurrency: 2"), 14, "concurrency: 1");
    return yaml;
}

// Enqueues with the application's own client; returns the jids.
// (A vector of vectors: nlohmann would take {{"A", 1}, {"B", 2}} for an object.)
using JobList = std::vector<std::vector<nlohmann::json>>;
inline std::vector<std::string> enqueue(const RedisServer& server, const JobList& jobs) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& j : jobs) list.push_back(nlohmann::json(j));
    auto [status, out] =
        run_command({"/usr/bin/ruby", kApp + "/enqueue.rb", list.dump()}, app_env(server));
    REQUIRE(status == 0);
    std::vector<std::string> jids;
    std::istringstream lines(out);
    for (std::string l; std::getline(lines, l);)
        if (l.rfind("jid: ", 0) == 0) jids.push_back(l.substr(5));
    INFO(out);
    REQUIRE(jids.size() == jobs.size());
    return jids;
}

inline nlohmann::json sidekiq_api(const RedisServer& server) {
    auto [status, out] = run_command({"/usr/bin/ruby", kApp + "/inspect.rb"}, app_env(server));
    REQUIRE(status == 0);
    // The last line that is a JSON object: Sidekiq 7 logs its Redis options (a Ruby hash) first.
    return nlohmann::json::parse(out.substr(out.rfind("\n{") + 1));
}

inline std::vector<nlohmann::json> records(redis::Connection& conn, const std::string& list) {
    std::vector<nlohmann::json> out;
    for (const auto& s : lrange(conn, "app:" + list)) out.push_back(nlohmann::json::parse(s));
    return out;
}

// Waits until the app's list app:<list> holds n records; the case stops there if it never does.
inline void require_records(redis::Connection& conn, const std::string& list, size_t n,
                            std::chrono::seconds within = std::chrono::seconds(60)) {
    INFO("waiting for " << n << " record(s) in app:" << list);
    REQUIRE(wait_until([&] { return records(conn, list).size() == n; }, within));
}

inline std::set<long long> pids_of(const std::vector<nlohmann::json>& rows, size_t index) {
    std::set<long long> pids;
    for (const auto& r : rows) pids.insert(r[index].get<long long>());
    return pids;
}

}  // namespace kiqd::test::runner_app
