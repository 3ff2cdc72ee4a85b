// The log formatter escapes whatever a message holds, for every call site at once: in text
// lines, controls (C0, DEL, C1) and bytes that are not UTF-8 become visible escapes and a
// message is always exactly one line; in JSON lines, the line parses and bytes that are not
// UTF-8 become U+FFFD. Valid UTF-8 text passes unchanged.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "server/logging.hpp"
#include "support/wait_until.hpp"

namespace {

// Logs `message` with a fresh logger in `format` to a temporary file; returns the file.
std::string logged(const std::string& format, const std::string& message) {
    char path[] = "/tmp/kiqd-escape-XXXXXX";
    ::close(::mkstemp(path));
    kiqd::LoggingConfig config;
    config.format = format;
    config.file = path;
    auto log = kiqd::make_logger(config, false);
    log->info("<{}>", message);
    log->flush();  // asynchronous: the writer thread writes the line a moment later
    std::string text;
    REQUIRE(kiqd::test::wait_until([&] {
        std::ifstream in(path, std::ios::binary);
        std::stringstream s;
        s << in.rdbuf();
        text = s.str();
        return !text.empty() && text.back() == '\n';
    }));
    ::unlink(path);
    return text;
}

// The message part of a text line ("... info: <message>\n" → "message").
std::string text_message(const std::string& line) {
    const auto open = line.find(" info: <");
    REQUIRE(open != std::string::npos);
    REQUIRE(line.size() >= open + 10);
    REQUIRE(line.compare(line.size() - 2, 2, ">\n") == 0);
    return line.substr(open + 8, line.size() - open - 10);
}

}  // namespace

TEST_CASE("text log lines escape controls and invalid UTF-8, one line per message", "[logging]") {
    const std::vector<std::pair<std::string, std::string>> cases{
        {"plain text, \"quotes\" and \\ stay", "plain text, \"quotes\" and \\ stay"},
        {"a\nb\rc\td", "a\\nb\\rc\\td"},
        {std::string("nul\0bel\a", 8), "nul\\x00bel\\x07"},
        {"esc\x1b[2Jdel\x7f", "esc\\x1b[2Jdel\\x7f"},
        {"c1 csi \xc2\x9b and nel \xc2\x85", "c1 csi \\u009b and nel \\u0085"},
        {"utf-8 \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 stays",
         "utf-8 \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 stays"},
        {"nbsp \xc2\xa0 stays", "nbsp \xc2\xa0 stays"},
        {"stray \x80 lead \xff", "stray \\x80 lead \\xff"},
        {"overlong \xc0\xaf", "overlong \\xc0\\xaf"},
        {"surrogate \xed\xa0\x80", "surrogate \\xed\\xa0\\x80"},
        {"too big \xf4\x90\x80\x80", "too big \\xf4\\x90\\x80\\x80"},
        {"cut short \xe2\x82", "cut short \\xe2\\x82"},
    };
    for (const auto& [message, expected] : cases) {
        INFO(message);
        const std::string line = logged("text", message);
        CHECK(std::count(line.begin(), line.end(), '\n') == 1);
        CHECK(text_message(line) == expected);
    }
}

TEST_CASE("JSON log lines parse whatever the message holds; invalid UTF-8 becomes U+FFFD",
          "[logging]") {
    const std::vector<std::pair<std::string, std::string>> cases{
        {"q\"b\\n\nt\t", "q\"b\\n\nt\t"},
        {"esc\x1b[2J del\x7f c1\xc2\x9b", "esc\x1b[2J del\x7f c1\xc2\x9b"},
        {"utf-8 \xc3\xa9\xf0\x9f\x98\x80", "utf-8 \xc3\xa9\xf0\x9f\x98\x80"},
        {"bad \xff\xfe \xc0\xaf \xed\xa0\x80 \xe2\x82",
         "bad \xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd "
         "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd "
         "\xef\xbf\xbd\xef\xbf\xbd"},
    };
    for (const auto& [message, expected] : cases) {
        INFO(message);
        const std::string line = logged("json", message);
        CHECK(std::count(line.begin(), line.end(), '\n') == 1);
        // Nothing a terminal would act on is in the line itself.
        CHECK(line.find('\x1b') == std::string::npos);
        CHECK(line.find("\xc2\x9b") == std::string::npos);
        nlohmann::json j;
        REQUIRE_NOTHROW(j = nlohmann::json::parse(line));
        CHECK(j["msg"] == "<" + expected + ">");
    }
}
