// LogLine: the text form is the `key=value` line kiqd always wrote; the JSON form round-trips any
// bytes through decode_log_line, and nothing else decodes as one.
#include "common/log_fields.hpp"

#include <catch2/catch.hpp>

using kiqd::decode_log_line;
using kiqd::LogLine;

namespace {
struct StructuredLines {
    explicit StructuredLines(bool on) { kiqd::set_structured_log_lines(on); }
    ~StructuredLines() { kiqd::set_structured_log_lines(false); }
};
LogLine sample_line() {
    LogLine line;
    line.field("class",
               "Hard\x1e\x1f"
               "3:x")
        .field("jid", "j1")
        .json_number("elapsed_ms", 1.5);
    line.tags(" urgency=high cpu=0.125ms n=42");
    return line;
}
}  // namespace

TEST_CASE("log line: text form puts the fields first and the tags last", "[logging]") {
    StructuredLines text(false);
    CHECK(sample_line().message("done", "done: 1.500 ms") ==
          "class=Hard\x1e\x1f"
          "3:x jid=j1 done: 1.500 ms urgency=high cpu=0.125ms n=42");
}

TEST_CASE("log line: JSON form round-trips hostile values and types the tags", "[logging]") {
    StructuredLines json(true);
    const std::string m = sample_line().message("done\x1d", "unused");
    const auto d = decode_log_line(m);
    REQUIRE(d);
    CHECK(d->event == "done\x1d");
    REQUIRE(d->fields.size() == 6);
    CHECK(d->fields[0].key == "class");
    CHECK(d->fields[0].value ==
          "Hard\x1e\x1f"
          "3:x");
    CHECK_FALSE(d->fields[0].number);
    CHECK(d->fields[2].key == "elapsed_ms");
    CHECK(d->fields[2].value == "1.500");
    CHECK(d->fields[2].number);
    CHECK(d->fields[3].value == "high");
    CHECK_FALSE(d->fields[4].number);  // "0.125ms" is not a JSON number
    CHECK(d->fields[5].value == "42");
    CHECK(d->fields[5].number);
}

TEST_CASE("log line: anything else is not decoded", "[logging]") {
    CHECK_FALSE(decode_log_line("class=A jid=b done"));
    CHECK_FALSE(decode_log_line(""));
    CHECK_FALSE(decode_log_line("\x1d"));  // no event
    CHECK_FALSE(
        decode_log_line("\x1dk\x1fs9:ab\x1e"
                        "e"));  // length past the end
    CHECK_FALSE(
        decode_log_line("\x1dmsg\x1fs1:a\x1e"
                        "e"));  // a reserved key
    CHECK_FALSE(
        decode_log_line("\x1dK\x1fs1:a\x1e"
                        "e"));  // not a lower-case key
    CHECK_FALSE(decode_log_line("\x1dk\x1fn3:1e5\x1e"
                                "e") == std::nullopt);  // a number
    CHECK_FALSE(
        decode_log_line("\x1dk\x1fn3:nan\x1e"
                        "e"));  // not a JSON number
    CHECK_FALSE(
        decode_log_line("\x1dk\x1fn2:01\x1e"
                        "e"));
    CHECK_FALSE(
        decode_log_line("\x1dk\x1fx1:a\x1e"
                        "e"));  // unknown kind
    CHECK_FALSE(
        decode_log_line("\x1dk\x1fs-1:a\x1e"
                        "e"));
}
