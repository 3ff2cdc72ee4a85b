#include "server/logging.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/wait_until.hpp"

TEST_CASE("JSON log lines are valid JSON, whatever the message holds", "[logging]") {
    char path[] = "/tmp/kiqd-log-XXXXXX";
    close(mkstemp(path));
    kiqd::LoggingConfig config;
    config.format = "json";
    config.file = path;
    auto log = kiqd::make_logger(config, false);
    log->info("class={} said \"hi\"\n\ttab \\ {}", "W", std::string("\x01"));
    log->flush();  // asynchronous: the writer thread writes the line a moment later
    std::string line;
    REQUIRE(kiqd::test::wait_until([&] {
        std::ifstream in(path);
        return static_cast<bool>(std::getline(in, line));
    }));
    auto j = nlohmann::json::parse(line);
    CHECK(j["level"] == "info");
    CHECK(j["msg"] == "class=W said \"hi\"\n\ttab \\ \x01");
    CHECK(j["pid"] == static_cast<int>(getpid()));
    CHECK(j["ts"].get<std::string>().back() == 'Z');
    unlink(path);
}
