// Redis AUTH and Redis Sentinel against real servers: the kiqd binary authenticating with a
// password from YAML, a file, an environment variable or an ACL user; a wrong or missing password
// giving one clear log line and never the password; and a fail-over (kill -9 of the master
// under a sentinel) that kiqd follows to the promoted replica, finishing every job it started, on
// plain TCP and with TLS between everything (sentinel, master, replica, kiqd).
// Every server is a child process on a free loopback port, stopped by PID.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <iostream>
#include <regex>
#include <set>

#include "kiqd/client.hpp"
#include "support/job_pushes.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/temp_dir.hpp"
#include "support/test_child.hpp"
#include "support/tls_certs.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using kiqd::test::KiqdProcess;
using kiqd::test::llen;
using kiqd::test::occurrences;
using kiqd::test::push_copies;
using kiqd::test::RedisServer;
using kiqd::test::wait_until;
using kiqd::test::zcard;

namespace {

// A redis-server in sentinel mode (`redis-server <conf> --sentinel`, which is what Debian's
// redis-sentinel runs) monitoring `mymaster`, with a writable config file in its own temporary
// directory (Sentinel rewrites it). Quick to declare the master down, for the tests.
class Sentinel {
  public:
    // `password`: the sentinel's own requirepass (put it in `extra_conf` too), for connect().
    // With `tls` it listens on a TLS port only and reaches the master and replicas over TLS.
    explicit Sentinel(int master_port, const std::string& extra_conf = "",
                      std::string password = "", bool tls = false)
        : port_(kiqd::test::free_port()), password_(std::move(password)) {
        const std::string conf = dir_.file("sentinel.conf");
        std::string listen = "port " + std::to_string(port_) + "\n";
        if (tls) {
            const auto& certs = kiqd::test::TestCerts::shared();
            tls_ = certs.client();
            listen = "port 0\ntls-port " + std::to_string(port_) + "\ntls-cert-file " +
                     certs.file("server.crt") + "\ntls-key-file " + certs.file("server.key") +
                     "\ntls-ca-cert-file " + certs.file("ca.crt") +
                     "\ntls-auth-clients no\ntls-replication yes\n";
        }
        std::ofstream(conf) << listen << "bind 127.0.0.1\ndir " << dir_.path() << "\nlogfile "
                            << dir_.file("sentinel.log") << "\n"
                            << "sentinel monitor mymaster 127.0.0.1 " << master_port << " 1\n"
                            << "sentinel down-after-milliseconds mymaster 1000\n"
                            << "sentinel failover-timeout mymaster 3000\n"
                            << extra_conf;
        pid_ = kiqd::test::fork_test_child();
        if (pid_ == 0) {
            ::execlp("redis-server", "redis-server", conf.c_str(), "--sentinel",
                     static_cast<char*>(nullptr));
            ::_exit(127);
        }
        if (pid_ < 0) throw std::runtime_error("fork failed");
        // On failure the child is already reaped (the destructor does not run when the
        // constructor throws).
        const std::string failure = kiqd::test::await_started(pid_, options());
        if (!failure.empty()) {
            pid_ = -1;
            throw std::runtime_error("redis-server --sentinel " + failure);
        }
    }
    ~Sentinel() { stop(); }
    Sentinel(const Sentinel&) = delete;
    Sentinel& operator=(const Sentinel&) = delete;

    int port() const { return port_; }
    redis::ConnectionOptions options() const {
        redis::ConnectionOptions o;
        o.endpoint.port = port_;
        o.endpoint.password = password_;
        o.endpoint.tls = tls_ != nullptr;
        o.tls = tls_;
        return o;
    }
    redis::Connection connect() const { return redis::Connection(options()); }

  private:
    void stop() {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGTERM);
        int status = 0;
        ::waitpid(pid_, &status, 0);
    }

    int port_;
    kiqd::test::TempDir dir_{"kiqd-sentinel"};  // its config, which Sentinel rewrites, and log
    std::string password_;
    std::shared_ptr<const redis::TlsContext> tls_;
    pid_t pid_ = -1;
};

long long processed(redis::Connection& c) {
    return kiqd::test::counter(c, "stat:processed");
}

// How many AUTH attempts the server refused (ACL LOG's count, summed over its entries).
long long failed_auths(redis::Connection& c) {
    long long total = 0;
    auto log = c.command({"ACL", "LOG"});
    for (size_t i = 0; i < log.size(); ++i) {
        auto entry = log[i];
        bool auth = false;
        long long n = 0;
        for (size_t k = 0; k + 1 < entry.size(); k += 2) {
            if (entry[k].str() == "reason" && entry[k + 1].str() == "auth") auth = true;
            if (entry[k].str() == "count") n = entry[k + 1].integer();
        }
        if (auth) total += n;
    }
    return total;
}

std::vector<std::string> push_noops(redis::Connection& conn, int n) {
    return push_copies(conn, {{"class", "Kiqd::Noop"}, {"args", nlohmann::json::array()}}, n);
}

// Runs `n` jobs through a kiqd started with `yaml` (and `env`) against `server`, stops it with
// SIGTERM, and returns its output.
std::string run_jobs(const RedisServer& server, const std::string& yaml, int n,
                     std::map<std::string, std::string> env = {}) {
    server.flushall();
    auto conn = server.connect();
    push_noops(conn, n);
    KiqdProcess kiqd(KIQD_BINARY, yaml, {}, std::move(env));
    // Every job's done line, not an empty queue: a job popped just before the stop is put back
    // in its queue, not run.
    CHECK(wait_until([&] {
        return occurrences(kiqd.output(), "queue=default done") == static_cast<size_t>(n);
    }));
    CHECK(kiqd.stop() == 0);
    INFO(kiqd.output());
    CHECK(processed(conn) == n);  // stats flush at exit
    CHECK_THAT(kiqd.output(), Catch::Contains("Bye!"));
    return kiqd.output();
}

std::string base_yaml(const RedisServer& server) {
    return "queues: [default]\nconcurrency: 2\npoll_interval_average: 0.5\nredis:\n  url: " +
           server.url() + "\n";
}

}  // namespace

TEST_CASE("auth: the daemon authenticates with a password from YAML, a file or the environment",
          "[sentinel][auth]") {
    const std::string pw = "s3cret-Pw-4711";
    RedisServer server({"--requirepass", pw});
    {
        auto out = run_jobs(server, base_yaml(server) + "  password: " + pw + "\n", 20);
        CHECK(out.find(pw) == std::string::npos);
    }
    {
        const std::string file = server.dir() + "/redis-password";
        std::ofstream(file) << pw << "\n";
        auto out = run_jobs(server, base_yaml(server) + "  password_file: " + file + "\n", 20);
        CHECK(out.find(pw) == std::string::npos);
    }
    {
        auto out = run_jobs(server, base_yaml(server) + "  password_env: KIQD_TEST_REDIS_PW\n", 20,
                            {{"KIQD_TEST_REDIS_PW", pw}});
        CHECK(out.find(pw) == std::string::npos);
    }
    {  // check-config validates the file and the password source, and prints no password.
        auto [code, out] =
            kiqd::test::check_config(KIQD_BINARY, base_yaml(server) + "  password: " + pw + "\n");
        CHECK(code == 0);
        CHECK_THAT(out, Catch::Contains("is valid"));
        CHECK(out.find(pw) == std::string::npos);
    }
    {  // The password in the URL still works.
        auto out = run_jobs(server,
                            "queues: [default]\nredis: {url: 'redis://:" + pw +
                                "@127.0.0.1:" + std::to_string(server.port()) + "/0'}\n",
                            20);
        CHECK(out.find(pw) == std::string::npos);
    }
}

TEST_CASE("auth: an ACL user from redis.username", "[sentinel][auth]") {
    RedisServer server({"--requirepass", "admin-pw"});
    auto admin = server.connect();
    admin.command({"ACL", "SETUSER", "worker", "on", ">w0rker-Pw", "~*", "&*", "+@all"});
    auto out =
        run_jobs(server, base_yaml(server) + "  username: worker\n  password: w0rker-Pw\n", 20);
    CHECK(out.find("w0rker-Pw") == std::string::npos);
    // No AUTH failure or permission denial was logged by the server.
    CHECK(admin.command({"ACL", "LOG"}).size() == 0);
}

TEST_CASE("auth: a wrong or missing password is one clear log line, never the password",
          "[sentinel][auth]") {
    const std::string pw = "right-Pw-0815";
    RedisServer server({"--requirepass", pw});
    server.flushall();
    auto conn = server.connect();
    push_noops(conn, 5);
    SECTION("wrong password") {
        const std::string wrong = "wr0ng-Pw-1234";
        KiqdProcess kiqd(KIQD_BINARY, base_yaml(server) + "  password: " + wrong + "\n");
        REQUIRE(kiqd.wait_for_output("rejected the credentials"));
        // It keeps retrying with backoff (the password may be fixed on the server side), but the
        // outage is logged once however many threads and attempts notice it.
        REQUIRE(wait_until([&] { return failed_auths(conn) >= 12; }));
        const auto running_out = kiqd.output();
        INFO(running_out);
        CHECK(occurrences(running_out, "rejected the credentials of user 'default' (WRONGPASS") ==
              1);
        CHECK(kiqd.running());
        CHECK(kiqd.stop() == 0);
        const auto out = kiqd.output();
        CHECK(out.find(wrong) == std::string::npos);
        CHECK(out.find(pw) == std::string::npos);
        CHECK(llen(conn, "queue:default") == 5);  // nothing ran
    }
    SECTION("no password") {
        KiqdProcess kiqd(KIQD_BINARY, base_yaml(server));
        if (!kiqd.wait_for_output("requires a password")) FAIL(kiqd.output());
        const auto running_out = kiqd.output();
        INFO(running_out);
        CHECK_THAT(running_out, Catch::Contains("requires a password (NOAUTH"));
        CHECK(occurrences(running_out, "Redis is unreachable") == 1);
        CHECK(kiqd.stop() == 0);
    }
    SECTION("a password_file that does not exist stops startup with exit 78") {
        KiqdProcess kiqd(KIQD_BINARY,
                         base_yaml(server) + "  password_file: " + server.dir() + "/nope\n");
        CHECK(kiqd.wait_exit() == 78);
        CHECK_THAT(kiqd.output(), Catch::Contains("redis.password_file (line 6): cannot read"));
    }
    SECTION("two password sources stop startup with exit 78") {
        KiqdProcess kiqd(
            KIQD_BINARY,
            base_yaml(server) + "  password: " + pw + "\n  password_env: KIQD_TEST_REDIS_PW\n", {},
            {{"KIQD_TEST_REDIS_PW", pw}});
        CHECK(kiqd.wait_exit() == 78);
        CHECK_THAT(kiqd.output(),
                   Catch::Contains("redis.password_env (line 7): conflicts with redis.password"));
        CHECK(kiqd.output().find(pw) == std::string::npos);
    }
}

TEST_CASE("sentinel: kiqd finds the master through a password-protected sentinel", "[sentinel]") {
    RedisServer master({"--requirepass", "master-Pw"});
    Sentinel sentinel(master.port(),
                      "requirepass sentinel-Pw\nsentinel auth-pass mymaster master-Pw\n",
                      "sentinel-Pw");
    const std::string yaml =
        "queues: [default]\nconcurrency: 2\nredis:\n  sentinels: "
        "['127.0.0.1:" +
        std::to_string(sentinel.port()) +
        "']\n  master_name: mymaster\n  password: master-Pw\n"
        "  sentinel_password: sentinel-Pw\n";
    auto out = run_jobs(master, yaml, 50);
    CHECK_THAT(out, Catch::Contains("redis=master 'mymaster' via sentinel 127.0.0.1:" +
                                    std::to_string(sentinel.port()) + ", db 0"));
    CHECK(out.find("master-Pw") == std::string::npos);
    CHECK(out.find("sentinel-Pw") == std::string::npos);

    // A master name the sentinel does not monitor: one clear line, kiqd keeps asking.
    KiqdProcess lost(KIQD_BINARY, std::regex_replace(yaml, std::regex("mymaster"), "nosuch"));
    REQUIRE(lost.wait_for_output("does not know master 'nosuch'"));
    CHECK(lost.stop() == 0);
}

namespace {

// A master, a replica and a sentinel; kiqd drains a queue through a kill -9 of the master.
// With `tls`, every link speaks TLS: kiqd to the sentinel and to both servers, the replica to
// the master, the sentinel to both.
void run_failover(bool tls) {
    auto server = [tls](std::vector<std::string> args) {
        return tls ? std::make_unique<RedisServer>(std::move(args), kiqd::test::TlsMode{})
                   : std::make_unique<RedisServer>(std::move(args));
    };
    const auto master_ptr = server({});
    RedisServer& master = *master_ptr;
    const auto replica_ptr = server({"--replicaof", "127.0.0.1", std::to_string(master.port()),
                                     "--tls-replication", tls ? "yes" : "no"});
    RedisServer& replica = *replica_ptr;
    auto rconn = replica.connect();
    REQUIRE(wait_until([&] {
        return std::string(rconn.command({"INFO", "replication"}).str())
                   .find("master_link_status:up") != std::string::npos;
    }));
    Sentinel sentinel(master.port(), "", "", tls);
    auto sconn = sentinel.connect();
    // The sentinel learns about the replica from the master's INFO; only then can it fail over.
    REQUIRE(wait_until(
        [&] {
            return sconn.command({"SENTINEL", "replicas", "mymaster"}).size() == 1;
        },
        std::chrono::seconds(30)));

    constexpr int jobs = 3000;
    auto mconn = master.connect();
    const auto jids = push_copies(mconn, {{"class", "Kiqd::Sleep"}, {"args", {0.005}}}, jobs);
    REQUIRE(mconn.command({"WAIT", "1", "5000"}).integer() == 1);
    REQUIRE(llen(rconn, "queue:default") == jobs);

    // With TLS: rediss:// for the master, and the sentinels as the URL (sentinel_tls unset).
    KiqdProcess kiqd(
        KIQD_BINARY,
        "queues: [default]\nconcurrency: 5\nredis:\n  sentinels: "
        "['127.0.0.1:" +
            std::to_string(sentinel.port()) + "']\n  master_name: mymaster\n" +
            (tls ? "  url: rediss://localhost/0\n  " + master.tls_yaml().substr(2) + "\n"
                 : std::string()));
    // Crash the master once kiqd is well into the queue (a third done).
    REQUIRE(wait_until([&] { return llen(mconn, "queue:default") <= jobs * 2 / 3; },
                       std::chrono::seconds(60)));
    master.kill9();

    // The sentinel promotes the replica and kiqd drains the rest of the queue from it.
    // (The sentinel disconnects the promoted replica's clients: rconn reconnects.)
    REQUIRE(wait_until(
        [&] {
            try {
                return rconn.command({"ROLE"})[0].str() == "master" &&
                       llen(rconn, "queue:default") == 0;
            } catch (const redis::IoError&) {
                return false;
            }
        },
        std::chrono::seconds(90)));
    // Every job kiqd started finished, and the jobs it did not start were lost in the fail-over
    // itself, at most one per processor thread. Jobs popped from the master but not yet
    // replicated run again (basic fetch is at-least-once). The other way round, a pop the
    // replica received whose reply never reached kiqd, is lost: Redis may send a command
    // to its replicas before it answers the client, and a master killed between the two took
    // that job with it. Basic fetch has at most one pop in flight per thread, so at most
    // `concurrency` (5) such jobs. The log is the evidence that survives the crash.
    constexpr size_t concurrency = 5;
    static const std::regex line(R"(jid=([0-9a-f]+) queue=default (start|done))");
    std::set<std::string> started, finished;
    const auto read_log = [&] {
        started.clear();
        finished.clear();
        const auto out = kiqd.output();
        for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it)
            ((*it)[2] == "start" ? started : finished).insert((*it)[1]);
    };
    const auto settled = [&] {
        read_log();
        return finished.size() >= jids.size() ||
               (finished.size() + concurrency >= jids.size() &&
                std::includes(finished.begin(), finished.end(), started.begin(), started.end()));
    };
    CHECK(wait_until(settled, std::chrono::seconds(10)));
    read_log();
    std::vector<std::string> missing;  // jobs that never finished
    for (const auto& jid : jids)
        if (!finished.count(jid)) missing.push_back(jid);
    {
        // On a failure, what kiqd's log says of (at most five of) the missing jobs.
        const auto out = kiqd.output();
        std::string about_missing = std::to_string(missing.size()) + " job(s) missing\n";
        for (size_t i = 0; i < missing.size() && i < 5; ++i) {
            about_missing += missing[i] + ":\n";
            for (size_t at = out.find(missing[i]); at != std::string::npos;
                 at = out.find(missing[i], at + 1)) {
                const size_t begin = out.rfind('\n', at);
                const size_t end = out.find('\n', at);
                about_missing +=
                    "  " + out.substr(begin == std::string::npos ? 0 : begin + 1,
                                      end == std::string::npos ? std::string::npos : end - begin);
            }
        }
        INFO(about_missing);
        // Every finished job logged its start too (the start lines are read right).
        CHECK(std::includes(started.begin(), started.end(), finished.begin(), finished.end()));
        CHECK(missing.size() <= concurrency);
        for (const auto& jid : missing) CHECK(!started.count(jid));
    }
    std::cout << "sentinel fail-over" << (tls ? " with TLS" : "") << ": " << jids.size()
              << " jobs, " << missing.size() << " lost in the fail-over\n";
    CHECK(kiqd.stop() == 0);
    const auto out = kiqd.output();
    std::string redis_lines;  // the log without the per-job lines
    for (size_t at = 0, end; at < out.size(); at = end + 1) {
        end = out.find('\n', at);
        if (end == std::string::npos) end = out.size();
        if (out.compare(at, end - at, "class=") == std::string::npos ||
            out.find("class=", at) > end)
            redis_lines += out.substr(at, end - at + 1);
    }
    INFO(redis_lines);
    // The outage is logged, and so is the recovery. (A connection idle during the fail-over,
    // such as the heartbeat's, notices only on its next use, after the others recovered; that
    // can make a second, instantly recovered outage line.)
    CHECK(occurrences(out, "Redis is unreachable") >= 1);
    CHECK(out.rfind("Redis is back after") != std::string::npos);
    CHECK(out.rfind("Redis is back after") > out.rfind("Redis is unreachable"));
    CHECK(zcard(rconn, "retry") == 0);
    CHECK(zcard(rconn, "dead") == 0);
    CHECK(processed(rconn) > 0);  // the stats flushed after the fail-over landed on the new master
}

}  // namespace

TEST_CASE(
    "sentinel: kiqd follows a fail-over (kill -9 of the master) and finishes every job it started",
    "[sentinel][failover]") {
    run_failover(false);
}

TEST_CASE("sentinel: a fail-over with TLS between everything: every job kiqd started finishes",
          "[sentinel][failover][tls]") {
    run_failover(true);
}
