// Integration [admin]: the operator's command line as the real kiqd binary, against a real
// redis-server: which Redis it reads (-C, $KIQD_CONFIG, REDIS_URL, --redis-url) and says so;
// `busy`, `scheduled`, `queue ls|clear`, `job JID` in text and --json; the bulk actions over
// more than 20,000 entries while another client moves the same entries (every job ends up in
// exactly one place, and the counts add up); the confirmation of `queue clear` on a terminal;
// `kiqd top` in a real terminal (tmux); and the help.
#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <functional>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "job/backtrace_codec.hpp"
#include "kiqd/keys.hpp"
#include "kiqd_cli.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_server.hpp"
#include "support/temp_dir.hpp"
#include "support/wait_until.hpp"

using kiqd::test::kiqd_binary;
using kiqd::test::RedisServer;
using kiqd::test::run_command;
using kiqd::test::TempDir;
using kiqd::test::wait_until;
using nlohmann::json;

namespace {

// Neither the test's environment nor a host's config decides which Redis a run reads.
std::map<std::string, std::string> clean_env(std::map<std::string, std::string> env = {}) {
    env.emplace("KIQD_CONFIG", "");
    env.emplace("REDIS_URL", "");
    return env;
}

// `kiqd ARGS` with stdin from /dev/null (never a terminal); {status, stdout+stderr}.
std::pair<int, std::string> run_kiqd(const std::vector<std::string>& args,
                                     std::map<std::string, std::string> env) {
    std::string cmd = "exec \"$0\"";
    for (size_t i = 0; i < args.size(); ++i) cmd += " \"$" + std::to_string(i + 1) + "\"";
    std::vector<std::string> argv{"/bin/sh", "-c", cmd + " </dev/null", kiqd_binary()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, std::move(env));
}

std::pair<int, std::string> admin(const RedisServer& redis, const std::vector<std::string>& args) {
    return run_kiqd(args, clean_env({{"REDIS_URL", redis.url()}}));
}

json admin_json(const RedisServer& redis, std::vector<std::string> args) {
    args.push_back("--json");
    auto [status, out] = admin(redis, args);
    INFO("kiqd " << json(args).dump() << " → " << status << ": " << out);
    REQUIRE(status == 0);
    return json::parse(out);
}

std::string job(const std::string& jid, const std::string& cls, json args, double enqueued_at,
                json extra = json::object()) {
    json j{{"class", cls},
           {"args", std::move(args)},
           {"jid", jid},
           {"queue", "default"},
           {"enqueued_at", enqueued_at}};
    j.update(extra);
    return j.dump();
}

// tmux's path ("" when it is not installed): run_command execs without a PATH search.
std::string tmux_path() {
    auto [status, out] = run_command({"/bin/sh", "-c", "command -v tmux"});
    if (status != 0 || out.empty()) return "";
    return out.substr(0, out.find('\n'));
}

bool have_tmux() {
    return !tmux_path().empty();
}

// A tmux server of the test's own (private socket), running one command in a pane of a fixed
// size; the pane stays after the command exits. The command runs under a small sh that writes
// its exit status to a file: tmux 3.3 can mark a pane dead (its terminal closed) and never
// report the status (#{pane_dead_status} stayed empty under load). Stopped by PID.
class Tmux {
  public:
    Tmux(const std::vector<std::string>& command, const std::map<std::string, std::string>& env,
         int width, int height) {
        std::vector<std::string> argv{tmux_,
                                      "-S",
                                      socket_,
                                      "new-session",
                                      "-d",
                                      "-x",
                                      std::to_string(width),
                                      "-y",
                                      std::to_string(height)};
        for (const auto& [k, v] : env) {
            argv.push_back("-e");
            argv.push_back(k + "=" + v);
        }
        // `trap : INT`: Ctrl-C reaches the command, and the sh lives on to write its status.
        std::string line =
            "/bin/sh -c 'trap : INT; \"$0\" \"$@\"; echo $? > " + status_file_ + "' ";
        for (const auto& c : command) line += "'" + c + "' ";
        argv.push_back(line);
        // In the same tmux command list, so it holds before the pane's command can exit.
        for (const char* a : {";", "set-option", "-g", "remain-on-exit", "on"}) argv.push_back(a);
        run(argv);
        pid_ = std::stoi(run({tmux_, "-S", socket_, "display-message", "-p", "#{pid}"}));
    }
    ~Tmux() {
        if (pid_ > 0) ::kill(pid_, SIGTERM);
    }
    std::string screen() { return run({tmux_, "-S", socket_, "capture-pane", "-p"}); }
    void keys(const std::vector<std::string>& keys) {
        std::vector<std::string> argv{tmux_, "-S", socket_, "send-keys"};
        argv.insert(argv.end(), keys.begin(), keys.end());
        run(argv);
    }
    void resize(int width, int height) {
        run({tmux_, "-S", socket_, "resize-window", "-x", std::to_string(width), "-y",
             std::to_string(height)});
    }
    // The command's exit status once it has exited (128 + the signal that ended it), else -1.
    int exit_status() {
        const std::string text = kiqd::test::read_file(status_file_);
        if (text.empty() || text.back() != '\n') return -1;  // not written (completely) yet
        return std::stoi(text);
    }
    bool shows(const std::string& text) {
        return wait_until([&] { return screen().find(text) != std::string::npos; });
    }

  private:
    std::string run(const std::vector<std::string>& argv) {
        auto [status, out] = run_command(argv);
        if (status != 0)
            throw std::runtime_error("tmux failed (" + std::to_string(status) +
                                     "): " + json(argv).dump() + ": " + out);
        return out;
    }
    std::string tmux_ = tmux_path();
    TempDir dir_{"kiqd-tmux"};
    std::string socket_ = dir_.file("socket");
    std::string status_file_ = dir_.file("status");
    int pid_ = -1;
};

}  // namespace

TEST_CASE("admin: which Redis is read: --redis-url, -C, $KIQD_CONFIG, REDIS_URL, default",
          "[admin][config]") {
    RedisServer by_flag, by_file, by_env_config, by_redis_url;
    for (auto* r : {&by_flag, &by_file, &by_env_config, &by_redis_url})
        r->connect().command({"SET", "stat:processed", std::to_string(r->port())});
    TempDir dir;
    const auto file = dir.write("c.yml", "redis:\n  url: " + by_file.url() + "\n");
    const auto env_file = dir.write("e.yml", "redis:\n  url: " + by_env_config.url() + "\n");
    const auto no_redis = dir.write("n.yml", "concurrency: 2\n");
    auto processed = [&](const std::vector<std::string>& args,
                         std::map<std::string, std::string> env) {
        std::vector<std::string> a = args;
        a.push_back("--json");
        auto [status, out] = run_kiqd(a, clean_env(env));
        INFO(out);
        REQUIRE(status == 0);
        return json::parse(out)["processed"].get<long long>();
    };
    const std::map<std::string, std::string> all_env{{"KIQD_CONFIG", env_file},
                                                     {"REDIS_URL", by_redis_url.url()}};
    CHECK(processed({"stats", "--redis-url", by_flag.url(), "-C", file}, all_env) ==
          by_flag.port());
    CHECK(processed({"stats", "-C", file}, all_env) == by_file.port());
    CHECK(processed({"stats"}, all_env) == by_env_config.port());
    CHECK(processed({"stats"}, {{"REDIS_URL", by_redis_url.url()}}) == by_redis_url.port());
    // A file without redis: falls back to REDIS_URL, as the daemon does.
    CHECK(processed({"stats"}, {{"KIQD_CONFIG", no_redis}, {"REDIS_URL", by_redis_url.url()}}) ==
          by_redis_url.port());

    // Text output starts with the endpoint and where it came from; never the password.
    auto [status, out] = run_kiqd({"stats", "-C", file}, clean_env(all_env));
    CHECK(status == 0);
    CHECK(
        out.rfind("Redis 127.0.0.1:" + std::to_string(by_file.port()) + "/0 (" + file + " (-C))\n",
                  0) == 0);
    std::tie(status, out) = run_kiqd({"queues"}, clean_env(all_env));
    CHECK(out.rfind("Redis 127.0.0.1:" + std::to_string(by_env_config.port()) + "/0 (" + env_file +
                        " (KIQD_CONFIG))\n",
                    0) == 0);
    std::tie(status, out) = run_kiqd(
        {"queues"}, clean_env({{"KIQD_CONFIG", no_redis}, {"REDIS_URL", by_redis_url.url()}}));
    CHECK(out.rfind("Redis 127.0.0.1:" + std::to_string(by_redis_url.port()) + "/0 (REDIS_URL, " +
                        no_redis + " (KIQD_CONFIG) has no redis.url)\n",
                    0) == 0);
    RedisServer with_password({"--requirepass", "s3cret-pw"});
    const std::string url =
        "redis://:s3cret-pw@127.0.0.1:" + std::to_string(with_password.port()) + "/0";
    std::tie(status, out) = run_kiqd({"processes", "--redis-url", url}, clean_env());
    CHECK(status == 0);
    CHECK(
        out.rfind("Redis 127.0.0.1:" + std::to_string(with_password.port()) + "/0 (--redis-url)\n",
                  0) == 0);
    CHECK(out.find("s3cret") == std::string::npos);
    // --no-headers: neither the Redis line nor the table's header.
    std::tie(status, out) = run_kiqd({"queues", "--no-headers", "-C", file}, clean_env());
    CHECK(status == 0);
    CHECK(out == "");

    // Nothing given and no readable /etc/kiqd/kiqd.yml: 127.0.0.1:6379, named in the error (or
    // in the first line, when a Redis runs there).
    if (::access("/etc/kiqd/kiqd.yml", R_OK) != 0) {
        std::tie(status, out) = run_kiqd({"stats"}, clean_env());
        CHECK(out.find("127.0.0.1:6379") != std::string::npos);
    }
}

TEST_CASE("admin: busy, scheduled, queue ls and job, in text and JSON", "[admin]") {
    RedisServer redis;
    auto c = redis.connect();
    const kiqd::Keys keys("");
    const double now = static_cast<double>(std::time(nullptr));
    for (int i = 0; i < 3; ++i)
        c.command({"LPUSH", "queue:default", job("q" + std::to_string(i), "Hard", {i}, now - 60)});
    c.command({"SADD", "queues", "default"});
    c.command({"ZADD", "schedule", std::to_string(now + 300), job("s1", "Later", {"a"}, now)});
    c.command({"ZADD", "schedule", std::to_string(now - 30), job("s2", "Late", {}, now)});
    const std::string backtrace =
        kiqd::encode_backtrace({"app/jobs/fail.rb:3:in `perform'", "lib/x.rb:9"});
    c.command({"ZADD", "retry", std::to_string(now + 600),
               job("r1", "Fail", {1, "x"}, now,
                   {{"error_class", "RuntimeError"},
                    {"error_message", "boom"},
                    {"retry_count", 1},
                    {"failed_at", now - 5},
                    {"error_backtrace", backtrace}})});
    c.command({"ZADD", "dead", std::to_string(now - 100),
               job("d1", "Gone", {}, now, {{"error_backtrace", {"old.rb:1", "old.rb:2"}}})});
    const std::string identity = "host:42:abcdef";
    c.command({"SADD", "processes", identity});
    c.command(
        {"HSET", identity, "info",
         json{{"hostname", "host"}, {"pid", 42}, {"concurrency", 5}, {"started_at", now}}.dump(),
         "busy", "1", "beat", std::to_string(now), "quiet", "false"});
    c.command({"HSET", identity + ":work", "tid-1",
               json{{"queue", "default"},
                    {"payload", job("b1", "Busy", {7}, now - 20)},
                    {"run_at", static_cast<long long>(now - 10)}}
                   .dump()});

    auto busy = admin_json(redis, {"busy"});
    REQUIRE(busy.size() == 1);
    CHECK(busy[0]["identity"] == identity);
    CHECK(busy[0]["thread"] == "tid-1");
    CHECK(busy[0]["jid"] == "b1");
    CHECK(busy[0]["class"] == "Busy");
    CHECK(busy[0]["args"] == json::array({7}));
    CHECK(busy[0]["run_at"] == now - 10);
    CHECK(busy[0]["run_at_iso"].get<std::string>().back() == 'Z');
    auto [status, out] = admin(redis, {"busy"});
    CHECK(status == 0);
    CHECK(out.find("PROCESS") != std::string::npos);
    CHECK(out.find("host:42:abcdef  tid-1   b1   Busy") != std::string::npos);

    auto scheduled = admin_json(redis, {"scheduled"});
    REQUIRE(scheduled.size() == 2);
    CHECK(scheduled[0]["jid"] == "s2");  // the earliest first
    CHECK(scheduled[1]["jid"] == "s1");
    CHECK(scheduled[1]["at"] == now + 300);
    CHECK(admin_json(redis, {"scheduled", "--limit", "1"}).size() == 1);
    std::tie(status, out) = admin(redis, {"scheduled"});
    CHECK(out.find("(overdue ") != std::string::npos);  // s2: due, not yet moved
    // s1 is due 300 s after `now`; the seconds the commands took (many under ASan) may show as
    // 4.9 or 4.8 minutes, never more than 5.0 and never "in -".
    std::smatch in_minutes;
    REQUIRE(std::regex_search(out, in_minutes, std::regex(R"(\(in ([0-9]+\.[0-9]) min\))")));
    CHECK(std::stod(in_minutes[1].str()) <= 5.0);
    CHECK(std::stod(in_minutes[1].str()) >= 4.0);
    CHECK(out.find("in -") == std::string::npos);

    auto listed = admin_json(redis, {"queue", "ls", "default"});
    REQUIRE(listed.size() == 3);
    CHECK(listed[0]["jid"] == "q0");  // the next to run (rightmost) first
    CHECK(listed[2]["jid"] == "q2");
    CHECK(listed[0]["enqueued_at"] == now - 60);
    CHECK(admin_json(redis, {"queue", "ls", "default", "--limit", "2"}).size() == 2);
    std::tie(status, out) = admin(redis, {"queue", "ls", "default", "--limit", "1"});
    CHECK(out.find("(the next 1 of 3 jobs") != std::string::npos);

    auto found = admin_json(redis, {"job", "r1"});
    REQUIRE(found["found"].size() == 1);
    CHECK(found["found"][0]["where"] == "retry");
    CHECK(found["found"][0]["job"]["error_message"] == "boom");
    CHECK(found["found"][0]["backtrace"] ==
          json::array({"app/jobs/fail.rb:3:in `perform'", "lib/x.rb:9"}));
    std::tie(status, out) = admin(redis, {"job", "r1"});
    CHECK(status == 0);
    CHECK(out.find("error        RuntimeError: boom") != std::string::npos);
    CHECK(out.find("backtrace:\n  app/jobs/fail.rb:3:in `perform'\n  lib/x.rb:9\n") !=
          std::string::npos);
    CHECK(admin_json(redis, {"job", "d1"})["found"][0]["backtrace"] ==
          json::array({"old.rb:1", "old.rb:2"}));
    CHECK(admin_json(redis, {"job", "q1"})["found"][0]["in"] == "default");
    CHECK(admin_json(redis, {"job", "s1"})["found"][0]["where"] == "scheduled");
    auto running = admin_json(redis, {"job", "b1"});
    CHECK(running["found"][0]["where"] == "busy");
    CHECK(running["found"][0]["in"] == identity);
    std::tie(status, out) = admin(redis, {"job", "nosuch"});
    CHECK(status == 1);
    CHECK(out.find("kiqd: job: no job with jid nosuch") == 0);
}

TEST_CASE("admin: queue clear asks on a terminal and needs --yes elsewhere", "[admin][tty]") {
    RedisServer redis;
    auto c = redis.connect();
    auto fill = [&] {
        for (int i = 0; i < 5; ++i) c.command({"LPUSH", "queue:mail", job("m", "M", {i}, 0)});
        c.command({"SADD", "queues", "mail"});
    };
    fill();
    auto [status, out] = admin(redis, {"queue", "clear", "mail"});
    CHECK(status == 1);
    CHECK(out.find("--yes") != std::string::npos);
    CHECK(c.command({"LLEN", "queue:mail"}).integer() == 5);
    auto cleared = admin_json(redis, {"queue", "clear", "mail", "--yes"});
    CHECK(cleared["deleted"] == 5);
    CHECK(c.command({"EXISTS", "queue:mail"}).integer() == 0);
    CHECK(c.command({"SISMEMBER", "queues", "mail"}).integer() == 0);

    if (!have_tmux()) {
        WARN("tmux is not installed: the confirmation on a terminal is not tested");
        return;
    }
    fill();
    const auto env = clean_env({{"REDIS_URL", redis.url()}});
    // Answers the question with `key`; returns the exit status and what the terminal shows.
    auto answer = [&](const std::string& key) {
        Tmux tmux({kiqd_binary(), "queue", "clear", "mail"}, env, 120, 20);
        REQUIRE(tmux.shows("Delete all 5 jobs of queue mail on Redis 127.0.0.1:" +
                           std::to_string(redis.port()) + "/0? [y/N]"));
        tmux.keys({key, "Enter"});
        REQUIRE(wait_until([&] { return tmux.exit_status() != -1; }));
        return std::make_pair(tmux.exit_status(), tmux.screen());
    };
    auto [no, no_screen] = answer("n");
    CHECK(no == 1);
    CHECK(no_screen.find("not cleared") != std::string::npos);
    CHECK(c.command({"LLEN", "queue:mail"}).integer() == 5);
    auto [yes, yes_screen] = answer("y");
    CHECK(yes == 0);
    CHECK(yes_screen.find("cleared queue mail: 5 jobs deleted") != std::string::npos);
    CHECK(c.command({"EXISTS", "queue:mail"}).integer() == 0);
}

// Another client moving entries out of the set while a bulk action walks it: each entry ends up
// in exactly one place, and what kiqd reports adds up with what the other client did.
TEST_CASE("admin: bulk actions over 20,000 entries while another client moves them",
          "[admin][bulk]") {
    RedisServer redis;
    auto c = redis.connect();
    constexpr int kEntries = 25000;
    const double now = static_cast<double>(std::time(nullptr));
    auto fill = [&](const std::string& set) {
        std::vector<kiqd::redis::Command> adds;
        for (int i = 0; i < kEntries; ++i)
            adds.push_back({"ZADD", set, std::to_string(now + i),
                            job("j" + std::to_string(i), "Bulk", {i}, now,
                                {{"retry_count", 3}, {"error_class", "E"}})});
        c.pipeline(adds);
    };
    // The other client: takes entries from the lowest score up (as the scheduler does) and
    // moves each one with ZREM, pushing it to queue:other only when its own ZREM removed it.
    auto mover = [&](const std::string& set, std::atomic<bool>& stop) {
        auto other = redis.connect();
        long long moved = 0;
        while (!stop) {
            auto head = other.command({"ZRANGE", set, "0", "49"});
            if (head.size() == 0) break;
            for (size_t i = 0; i < head.size(); ++i) {
                const std::string member(head[i].str());
                auto r =
                    other.command({"EVAL",
                                   "if redis.call('zrem', KEYS[1], ARGV[1]) == 1 then "
                                   "redis.call('lpush', KEYS[2], ARGV[1]) return 1 end return 0",
                                   "2", set, "queue:other", member});
                moved += r.integer();
            }
        }
        return moved;
    };
    auto jids_in = [&](const std::string& key) {
        std::multiset<std::string> jids;
        auto all = c.command({"LRANGE", key, "0", "-1"});
        for (size_t i = 0; i < all.size(); ++i)
            jids.insert(json::parse(all[i].str())["jid"].get<std::string>());
        return jids;
    };

    // Runs `action` (a kiqd run) once the mover has started on `set`; returns its JSON result
    // and how many entries the mover moved.
    auto while_moving = [&](const std::string& set, const std::function<json()>& action) {
        const long long before = c.command({"ZCARD", set}).integer();
        std::atomic<bool> stop{false};
        auto other = std::async(std::launch::async, [&] { return mover(set, stop); });
        REQUIRE(wait_until([&] { return c.command({"ZCARD", set}).integer() < before; }));
        json result = action();
        stop = true;
        return std::make_pair(result, other.get());
    };

    SECTION("retries retry --all") {
        fill("retry");
        auto [result, moved_by_other] = while_moving("retry", [&] {
            return admin_json(redis, {"retries", "retry", "--all"});
        });
        CHECK(c.command({"ZCARD", "retry"}).integer() == 0);
        const auto ours = jids_in("queue:default");
        const auto theirs = jids_in("queue:other");
        CHECK(result["retried"].get<long long>() == static_cast<long long>(ours.size()));
        CHECK(moved_by_other == static_cast<long long>(theirs.size()));
        CHECK(ours.size() + theirs.size() == kEntries);
        CHECK(result["matched"].get<long long>() ==
              result["retried"].get<long long>() + result["skipped"].get<long long>());
        CHECK(result["skipped"].get<long long>() <= moved_by_other);
        std::set<std::string> every(ours.begin(), ours.end());
        every.insert(theirs.begin(), theirs.end());
        CHECK(every.size() == kEntries);  // none lost, none in two places, none twice
        // retry_count − 1, as SortedEntry#retry.
        CHECK(json::parse(c.command({"LINDEX", "queue:default", "0"}).str())["retry_count"] == 2);
    }
    SECTION("retries kill --all, then dead delete --all") {
        fill("retry");
        TempDir dir;
        const auto cfg = dir.write("k.yml", "dead_max_jobs: 100000\n");
        auto [result, moved_by_other] = while_moving("retry", [&] {
            auto [status, out] = run_kiqd({"retries", "kill", "--all", "--json", "-C", cfg},
                                          clean_env({{"REDIS_URL", redis.url()}}));
            INFO(out);
            REQUIRE(status == 0);
            return json::parse(out);
        });
        CHECK(c.command({"ZCARD", "retry"}).integer() == 0);
        const long long dead = c.command({"ZCARD", "dead"}).integer();
        CHECK(result["killed"].get<long long>() == dead);
        CHECK(result["trimmed"] == 0);
        CHECK(dead + moved_by_other == kEntries);
        CHECK(c.command({"LLEN", "queue:other"}).integer() == moved_by_other);

        auto [deleted, moved2] = while_moving("dead", [&] {
            return admin_json(redis, {"dead", "delete", "--all"});
        });
        CHECK(c.command({"ZCARD", "dead"}).integer() == 0);
        CHECK(deleted["deleted"].get<long long>() + moved2 == dead);
        CHECK(deleted["matched"].get<long long>() ==
              deleted["deleted"].get<long long>() + deleted["skipped"].get<long long>());
    }
    SECTION("text output, and no progress when stderr is not a terminal") {
        fill("dead");
        auto [status, out] = admin(redis, {"dead", "retry", "--all"});
        CHECK(status == 0);
        CHECK(out.find("retried 25000 of 25000 matching dead entries\n") != std::string::npos);
        CHECK(out.find('\r') == std::string::npos);
        CHECK(c.command({"LLEN", "queue:default"}).integer() == kEntries);
    }
}

TEST_CASE("admin: kiqd top in a terminal: draws, follows resizes, quits on q and Ctrl-C",
          "[admin][top][tty]") {
    RedisServer redis;
    auto c = redis.connect();
    c.command({"SADD", "queues", "critical"});
    c.command({"LPUSH", "queue:critical", job("t1", "T", {}, 0)});
    c.command({"SET", "stat:processed", "4242"});
    // Not a terminal: one frame, no escape sequences.
    auto [status, out] = admin(redis, {"top"});
    CHECK(status == 0);
    CHECK(out.find("kiqd top  Redis 127.0.0.1:") == 0);
    CHECK(out.find("processed 4242") != std::string::npos);
    CHECK(out.find("critical") != std::string::npos);
    CHECK(out.find('\x1b') == std::string::npos);

    if (!have_tmux()) {
        WARN("tmux is not installed: kiqd top in a terminal is not tested");
        return;
    }
    const auto env = clean_env({{"REDIS_URL", redis.url()}});
    {
        Tmux tmux({kiqd_binary(), "top", "--interval", "0.2"}, env, 100, 30);
        REQUIRE(tmux.shows("processed 4242"));
        CHECK(tmux.shows("critical  1"));
        // New counts show up on a later refresh, with a rate.
        c.command({"SET", "stat:processed", "5000"});
        REQUIRE(tmux.shows("processed 5000"));
        // A narrower, shorter terminal: the frame is redrawn to fit, the title line kept.
        tmux.resize(40, 6);
        REQUIRE(wait_until([&] {
            const auto s = tmux.screen();
            return s.rfind("kiqd top  Redis", 0) == 0 &&
                   s.find("a taller terminal") != std::string::npos;
        }));
        CHECK(tmux.screen().find("QUEUE") == std::string::npos);
        tmux.keys({"q"});
        REQUIRE(wait_until([&] { return tmux.exit_status() != -1; }));
        CHECK(tmux.exit_status() == 0);
        // The alternate screen is left: the dashboard is gone from the terminal.
        CHECK(tmux.screen().find("processed 5000") == std::string::npos);
    }
    {
        Tmux tmux({kiqd_binary(), "top"}, env, 100, 30);
        REQUIRE(tmux.shows("processed"));
        tmux.keys({"C-c"});
        REQUIRE(wait_until([&] { return tmux.exit_status() != -1; }));
        CHECK(tmux.exit_status() == 0);
    }
}

TEST_CASE("admin: help names kiqd, and each command's help is its own", "[admin][help]") {
    auto [status, out] = run_kiqd({"--help"}, clean_env());
    CHECK(status == 0);
    CHECK(out.find("Usage: kiqd [OPTIONS]") != std::string::npos);
    CHECK(out.find(KIQD_BINARY) == std::string::npos);
    std::tie(status, out) = run_kiqd({"help"}, clean_env());
    CHECK(status == 0);
    CHECK(out.find("Usage: kiqd [OPTIONS]") != std::string::npos);
    CHECK(out.find("  busy ") != std::string::npos);
    for (const std::string cmd : {"job", "queue", "retries", "top", "stats"}) {
        std::tie(status, out) = run_kiqd({"help", cmd}, clean_env());
        INFO(cmd << ": " << out);
        CHECK(status == 0);
        CHECK(out.find("Usage: kiqd " + cmd + " ") != std::string::npos);
        CHECK(out.find("Subcommands:") == std::string::npos);
        auto [s2, direct] = run_kiqd({cmd, "--help"}, clean_env());
        CHECK(s2 == 0);
        CHECK(direct == out);
    }
    std::tie(status, out) = run_kiqd({"help", "nosuch"}, clean_env());
    CHECK(status == 64);
}

TEST_CASE("admin: bulk progress is drawn on a terminal and erased, and absent elsewhere",
          "[admin][bulk][tty]") {
    RedisServer redis;
    auto c = redis.connect();
    constexpr int kEntries = 2500;  // three batches of 1,000
    const double now = static_cast<double>(std::time(nullptr));
    auto fill = [&] {
        std::vector<kiqd::redis::Command> adds;
        for (int i = 0; i < kEntries; ++i)
            adds.push_back({"ZADD", "dead", std::to_string(now + i),
                            job("p" + std::to_string(i), "Bulk", {i}, now)});
        c.pipeline(adds);
    };
    // On a terminal: script(1) gives the command a pseudo-terminal and records every byte it
    // writes, so the progress lines, later erased on the screen, are all in the transcript.
    fill();
    const std::string command =
        "'" + kiqd_binary() + "' dead delete --all --redis-url '" + redis.url() + "' </dev/null";
    auto [status, transcript] =
        run_command({"/usr/bin/script", "-q", "-e", "-c", command, "/dev/null"}, clean_env());
    INFO(transcript);
    CHECK(status == 0);
    // ZSCAN's batches are about 1,000 entries (COUNT is a hint): the last line says all of them.
    CHECK_THAT(transcript, Catch::Contains("dead delete: ") &&
                               Catch::Contains(" matched of ~2500 entries\r\x1b[K") &&
                               Catch::Contains("dead delete: 2500 done, 0 skipped, 0 refused; "
                                               "2500 matched of ~2500 entries"));
    CHECK(c.command({"ZCARD", "dead"}).integer() == 0);
    // Not on a terminal: the same action prints its result only.
    fill();
    auto [plain_status, plain] = admin(redis, {"dead", "delete", "--all"});
    INFO(plain);
    CHECK(plain_status == 0);
    CHECK(plain.find("matched of ~") == std::string::npos);
    CHECK(plain.find('\x1b') == std::string::npos);
    CHECK(c.command({"ZCARD", "dead"}).integer() == 0);
}
