// Plugins (`plugins:`) in the real kiqd binary, and the example daemon built on kiqd::run:
// the example plugin runs real jobs, a throwing handler becomes a normal retry, and a missing
// file, missing entry point, other ABI version or failing register stop startup with exit 78.
#include "kiqd/plugin.hpp"

#include <signal.h>

#include <catch2/catch.hpp>

#include "kiqd/client.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_reads.hpp"
#include "support/redis_server.hpp"
#include "support/wait_until.hpp"

using namespace kiqd;
using kiqd::test::default_queue_config;
using kiqd::test::KiqdProcess;
using kiqd::test::llen;
using kiqd::test::parse_each;
using kiqd::test::RedisServer;
using kiqd::test::wait_until;
using kiqd::test::zcard;
using kiqd::test::zrange;

TEST_CASE("plugin: the example plugin runs jobs; throwing handlers become retries", "[plugin]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    Client client(Keys{}, Compat::v6);
    client.push(conn, {{"class", "Example::Thumbnail"}, {"args", {"/img/a.png", 128}}});
    const std::string explode = client.push(conn, {{"class", "Example::Explode"}});
    const std::string reject = client.push(conn, {{"class", "Example::Reject"}, {"args", {"x"}}});
    KiqdProcess kiqd(KIQD_BINARY, default_queue_config(server, std::string("plugins:\n  - ") +
                                                                   KIQD_EXAMPLE_PLUGIN + "\n"));
    REQUIRE(wait_until([&] { return zcard(conn, "retry") == 2; }));
    REQUIRE(wait_until([&] { return llen(conn, "example:thumbnails") == 1; }));
    CHECK(conn.command({"LINDEX", "example:thumbnails", "0"}).str() == "/img/a.png@128");
    std::map<std::string, nlohmann::json> retries;
    const auto all = zrange(conn, "retry");
    for (auto e : parse_each(all)) retries[e["jid"]] = e;
    CHECK(retries[explode]["error_class"] == "std::runtime_error");
    CHECK(retries[explode]["error_message"] == "the plugin blew up");
    CHECK(retries[explode]["retry_count"] == 0);
    CHECK(retries[reject]["error_class"] == "ArgumentError");
    CHECK(retries[reject]["error_message"] == "rejected [\"x\"]");
    CHECK(kiqd.running());
    // Awaited: the log reaches the file asynchronously (once read "" here under load).
    CHECK(kiqd.wait_for_output("loaded plugin " + std::string(KIQD_EXAMPLE_PLUGIN) +
                               " (3 new handler(s))"));
    // The retry runs again through the plugin, still without harm.
    conn.command({"ZADD", "retry", "0", all[0]});
    REQUIRE(wait_until([&] {
        for (auto e : parse_each(zrange(conn, "retry")))
            if (e["retry_count"] == 1) return true;
        return false;
    }));
    CHECK(kiqd.stop() == 0);
}

TEST_CASE("plugin: unusable plugins stop startup with exit 78 naming the plugin", "[plugin]") {
    const std::string redis = "redis: {url: redis://127.0.0.1:1/0}\nqueues: [default]\n";
    struct Case {
        std::string path, expected;
    };
    for (const auto& c : std::vector<Case>{
             {"/nonexistent/libjobs.so",
              "plugin /nonexistent/libjobs.so (line 4): cannot be loaded: "
              "/nonexistent/libjobs.so: cannot open shared object file"},
             {KIQD_TEST_PLUGIN_no_entry_point,
              std::string("plugin ") + KIQD_TEST_PLUGIN_no_entry_point +
                  " (line 4): is not a kiqd plugin: missing entry point kiqd_plugin_abi_version"},
             {KIQD_TEST_PLUGIN_wrong_abi,
              std::string("plugin ") + KIQD_TEST_PLUGIN_wrong_abi +
                  " (line 4): was built for kiqd plugin ABI version 999, but this kiqd " +
                  KIQD_VERSION + " has ABI version " + std::to_string(KIQD_PLUGIN_ABI_VERSION) +
                  ": rebuild it against this kiqd's headers"},
             {KIQD_TEST_PLUGIN_throwing_register,
              std::string("plugin ") + KIQD_TEST_PLUGIN_throwing_register +
                  " (line 4): failed to register: missing IMAGE_BUCKET setting"},
         }) {
        const std::string yaml = redis + "plugins:\n  - " + c.path + "\n";
        KiqdProcess p(KIQD_BINARY, yaml);
        CHECK(p.wait_exit() == 78);
        CHECK_THAT(p.output(), Catch::Contains(c.expected));
        auto [code, out] = kiqd::test::check_config(KIQD_BINARY, yaml);
        CHECK(code == 78);
        CHECK_THAT(out, Catch::Contains(c.expected));
    }
}

TEST_CASE("example daemon: C++ handlers, a middleware, plugins and exec handlers together",
          "[plugin][example]") {
    auto& server = RedisServer::shared();
    server.flushall();
    auto conn = server.connect();
    Client client(Keys{}, Compat::v6);
    client.push(conn, {{"class", "Greeter"}, {"args", {"kiqd"}}});
    const std::string div0 = client.push(conn, {{"class", "Divide"}, {"args", {1, 0}}});
    client.push(conn, {{"class", "Example::Thumbnail"}, {"args", {"b.png", 64}}});
    client.push(conn, {{"class", "ViaExec"}});
    KiqdProcess kiqd(
        KIQD_EXAMPLE_DAEMON,
        default_queue_config(server, std::string("server_middleware: [timing]\nplugins: [") +
                                         KIQD_EXAMPLE_PLUGIN +
                                         "]\nhandlers:\n  ViaExec:\n    exec: [/bin/echo, "
                                         "from-exec]\n"));
    REQUIRE(wait_until([&] { return zcard(conn, "retry") == 1; }));
    REQUIRE(wait_until([&] { return llen(conn, "example:thumbnails") == 1; }));
    REQUIRE(kiqd.wait_for_output("stdout: from-exec"));
    auto entry = nlohmann::json::parse(zrange(conn, "retry").at(0));
    CHECK(entry["jid"] == div0);
    CHECK(entry["error_class"] == "ZeroDivisionError");
    REQUIRE(kiqd.wait_for_output("hello, kiqd!"));
    // The timing middleware logs after its handler returns (an exec handler returns once its
    // command has exited, after its last output line): awaited, not read at once.
    CHECK(kiqd.wait_for_output("timing: Greeter jid="));
    CHECK(kiqd.wait_for_output("timing: ViaExec jid="));
    CHECK(kiqd.stop() == 0);
}
