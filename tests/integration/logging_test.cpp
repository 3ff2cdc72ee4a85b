// Log lines as log pipelines and the journal read them: JSON lines carry the job's fields as keys
// (class, jid, queue, elapsed_ms, error_class, urgency, …); under systemd (JOURNAL_STREAM naming
// stdout) each line starts with its syslog priority and has no timestamp of kiqd's own.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "support/kiqd_process.hpp"
#include "support/redis_server.hpp"
#include "support/temp_dir.hpp"
#include "support/wait_until.hpp"

using kiqd::test::KiqdProcess;
using kiqd::test::lines_of;
using kiqd::test::RedisServer;
using kiqd::test::TempDir;
using kiqd::test::wait_until;

namespace {

// kiqd's own timestamp in front of a text line: 2026-11-26T10:29:46.575Z.
const std::string kTimestampPattern = R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)";
const std::regex kTimestamp(kTimestampPattern);

void push_logged(RedisServer& server, const std::string& cls, const std::string& jid) {
    auto conn = server.connect();
    const nlohmann::json job{{"class", cls},   {"args", nlohmann::json::array()},
                             {"jid", jid},     {"queue", "default"},
                             {"retry", false}, {"urgency", "high"}};
    conn.command({"LPUSH", "queue:default", job.dump()});
}

// The parsed JSON line about `jid` whose msg is `event` (null when there is none yet).
nlohmann::json json_line(const std::string& output, const std::string& jid,
                         const std::string& event) {
    for (const auto& line : lines_of(output)) {
        const auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_object() && j.value("jid", "") == jid && j.value("msg", "") == event) return j;
    }
    return nullptr;
}

}  // namespace

TEST_CASE("JSON logs: the job's fields are keys of the line, numbers as numbers", "[logging]") {
    auto& server = RedisServer::shared();
    server.flushall();
    KiqdProcess kiqd(KIQD_BINARY, kiqd::test::kiqd_config(server,
                                                          "queues: [default]\nconcurrency: 1\n"
                                                          "logging: {format: json}\n"));
    push_logged(server, "Kiqd::Noop", "0123456789abcdef00000001");
    push_logged(server, "Kiqd::Fail", "0123456789abcdef00000002");
    REQUIRE(wait_until(
        [&] { return !json_line(kiqd.output(), "0123456789abcdef00000002", "fail").is_null(); }));
    const std::string out = kiqd.output();
    INFO(out);
    const auto done = json_line(out, "0123456789abcdef00000001", "done");
    REQUIRE(done.is_object());
    CHECK(done.at("class") == "Kiqd::Noop");
    CHECK(done.at("queue") == "default");
    CHECK(done.at("level") == "info");
    CHECK(done.at("elapsed_ms").is_number());
    CHECK(done.at("urgency") == "low");  // the worker metadata's tags are keys too
    CHECK(done.at("cpu").is_string());
    CHECK(!json_line(out, "0123456789abcdef00000001", "start").is_null());
    const auto fail = json_line(out, "0123456789abcdef00000002", "fail");
    CHECK(fail.at("level") == "warning");
    CHECK(fail.at("error_class") == "RuntimeError");
    CHECK(fail.at("error_message") == "Kiqd::Fail");
    CHECK(fail.at("outcome") == "discarded (retry: false)");
    CHECK(fail.at("elapsed_ms").is_number());
    CHECK(kiqd.stop() == 0);
}

// Runs kiqd through sh so that JOURNAL_STREAM is set to what the child's stdout really is (its
// device and inode), as systemd sets it; or to something else when `matching` is false.
std::string run_under_journal(bool matching, const std::string& format) {
    auto& server = RedisServer::shared();
    server.flushall();
    TempDir dir{"kiqd-journal"};
    const std::string config =
        dir.write("kiqd.yml", kiqd::test::kiqd_config(server,
                                                      "queues: [default]\nconcurrency: 1\n"
                                                      "logging: {format: " +
                                                          format + "}\n"));
    const std::string stream = matching ? "$(stat -L -c %d:%i /proc/$$/fd/1)" : "1:1";
    KiqdProcess kiqd(
        "/bin/sh", "",
        {"-c", "JOURNAL_STREAM=" + stream + " exec \"$0\" -C \"$1\"", KIQD_BINARY, config});
    push_logged(server, "Kiqd::Fail", "0123456789abcdef00000003");
    REQUIRE(wait_until([&] {
        return kiqd.output().find("0123456789abcdef00000003") != std::string::npos &&
               kiqd.output().find("Kiqd::Fail") != std::string::npos &&
               kiqd.output().find("fail") != std::string::npos;
    }));
    REQUIRE(kiqd.stop() == 0);
    return kiqd.output();
}

TEST_CASE("journald: priority prefixes and no timestamp when stdout is the journal", "[logging]") {
    const std::string out = run_under_journal(true, "text");
    INFO(out);
    size_t info = 0, warning = 0;
    for (const auto& line : lines_of(out)) {
        CHECK(line.rfind("<", 0) == 0);  // every line has a priority
        CHECK_FALSE(std::regex_search(line, kTimestamp));
        CHECK(line.find("pid=") == std::string::npos);
        if (line.rfind("<6>tid=", 0) == 0 && line.find(" info: ") != std::string::npos) ++info;
        if (line.rfind("<4>tid=", 0) == 0 &&
            line.find("jid=0123456789abcdef00000003") != std::string::npos)
            ++warning;
    }
    CHECK(info > 0);
    CHECK(warning == 1);  // the failure, a warning
}

TEST_CASE("journald: JSON lines keep their object after the priority prefix", "[logging]") {
    const std::string out = run_under_journal(true, "json");
    INFO(out);
    size_t fails = 0;
    for (const auto& line : lines_of(out)) {
        REQUIRE(line.size() > 3);
        CHECK(line[0] == '<');
        const auto j = nlohmann::json::parse(line.substr(3), nullptr, false);
        REQUIRE(j.is_object());
        if (j.value("msg", "") == "fail") {
            CHECK(line.rfind("<4>{", 0) == 0);
            ++fails;
        }
    }
    CHECK(fails == 1);
}

TEST_CASE("journald: a JOURNAL_STREAM that is not stdout changes nothing", "[logging]") {
    const std::string out = run_under_journal(false, "text");
    INFO(out);
    for (const auto& line : lines_of(out))  // kiqd's own timestamp first
        CHECK(std::regex_search(line, std::regex("^" + kTimestampPattern)));
}
