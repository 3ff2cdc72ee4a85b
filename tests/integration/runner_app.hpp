#pragma once
// The Ruby application the runner cases run (tests/runners/ruby_app) and the helpers they share:
// its config, its client, and the records its jobs write to its own Redis (app:<list>).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
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

// The test world the cases run in (scripts/world sets KIQD_WORLD; ctest's runner_sidekiq73 and
// runner_sidekiq81 run integration_tests inside one), or "" for Debian's Ruby and Sidekiq 6.4.1.
inline std::string world() {
    const char* w = std::getenv("KIQD_WORLD");
    return w ? w : "";
}

// The Ruby the application runs on, an absolute path (kiqd_process's run_command does not search
// PATH): Debian's /usr/bin/ruby, or inside a world the world's `ruby`, first on PATH. kiqd and
// its runner processes inherit the world's environment (BUNDLE_GEMFILE, RUBYOPT=-rbundler/setup).
inline const std::string& ruby() {
    static const std::string path = [] {
        if (world().empty()) return std::string("/usr/bin/ruby");
        const char* env_path = std::getenv("PATH");
        std::istringstream dirs(env_path ? env_path : "");
        for (std::string dir; std::getline(dirs, dir, ':');) {
            if (dir.empty()) continue;
            const std::string candidate = dir + "/ruby";
            if (::access(candidate.c_str(), X_OK) == 0) return candidate;
        }
        return std::string("ruby (not found on PATH)");
    }();
    return path;
}

// What `ruby()` makes of `require 'sidekiq'; require 'active_job'`: {loads, the Sidekiq version
// it loads, or its output when it does not}.
inline const std::pair<bool, std::string>& ruby_stack() {
    static const std::pair<bool, std::string> stack = [] {
        auto [status, out] = run_command(
            {ruby(), "-e",
             "require 'sidekiq'; require 'active_job'; print \"\\n\", Sidekiq::VERSION"});
        if (status != 0) return std::pair<bool, std::string>{false, out};
        return std::pair<bool, std::string>{true, out.substr(out.rfind('\n') + 1)};
    }();
    return stack;
}

inline bool have_ruby_stack() {
    return ruby_stack().first;
}

// The application's Sidekiq: "6.4.1" (Debian), or the world's.
inline std::string sidekiq_version() {
    return have_ruby_stack() ? ruby_stack().second : "";
}
inline int sidekiq_major() {
    return std::atoi(sidekiq_version().c_str());
}

// Without a world, a machine without Debian's ruby-sidekiq and ruby-activejob skips the Ruby
// cases; inside a world the world must work: the case fails with the command that installs it.
#define REQUIRE_RUBY_STACK()                                                                      \
    if (!have_ruby_stack()) {                                                                     \
        if (!world().empty())                                                                     \
            FAIL("the " << world() << " world's Ruby (" << ruby()                                 \
                        << ") cannot load sidekiq and active_job: run bash scripts/install-gems " \
                        << world() << "\n"                                                        \
                        << ruby_stack().second);                                                  \
        WARN("skipped: /usr/bin/ruby with ruby-sidekiq and ruby-activejob is not installed");     \
        return;                                                                                   \
    }

// Every Ruby case begins so: skipped without Ruby's stack, then the shared server, flushed, and a
// connection to it (`server`, `conn`).
#define RUBY_CASE_BEGIN()                 \
    REQUIRE_RUBY_STACK();                 \
    auto& server = RedisServer::shared(); \
    server.flushall();                    \
    auto conn = server.connect()

// The application's environment: its Redis. (The Sidekiq it loads is the one `ruby()` loads:
// Debian's, or the world's, whose environment kiqd and its runners inherit.)
inline std::map<std::string, std::string> app_env(const RedisServer& server) {
    return {{"APP_REDIS_URL", server.url()}};
}

// kiqd's config with a runner `ruby` for every class ("*"), plus `runner_extra` under it.
inline std::string runner_config(const RedisServer& server, const std::string& runner_extra = "",
                                 const std::string& extra = "") {
    return kiqd::test::default_queue_config(
        server, "concurrency: 2\ntimeout: 10\nrunners:\n  ruby:\n    command: [\"" + ruby() +
                    "\", \"" + kRunner + "\", \"--require\", \"" + kApp +
                    "/app.rb\"]\n    processes: 2\n" + runner_extra +
                    "handlers:\n  \"*\": {runner: ruby}\n" + extra);
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
    auto [status, out] = run_command({ruby(), kApp + "/enqueue.rb", list.dump()}, app_env(server));
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
    auto [status, out] = run_command({ruby(), kApp + "/inspect.rb"}, app_env(server));
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
