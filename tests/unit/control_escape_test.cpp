// The shared escaping (common/control_escape.hpp) and the admin table built on it: invisible
// characters that reorder or hide text are escaped like controls, printable UTF-8 passes, and a
// table whose cells hold escaped controls, accents, wide or combining characters keeps its
// columns aligned on the terminal.
#include "common/control_escape.hpp"

#include <catch2/catch.hpp>
#include <sstream>

#include "admin/table.hpp"

using kiqd::display_width;
using kiqd::escape_control;

TEST_CASE("escape_control: controls, C1, format characters and bad bytes become visible",
          "[escape]") {
    CHECK(escape_control("a\nb\rc\td") == "a\\nb\\rc\\td");
    CHECK(escape_control("\x1b[2J\x7f") == "\\x1b[2J\\x7f");
    CHECK(escape_control("csi \xc2\x9b") == "csi \\u009b");
    CHECK(escape_control("bad \xff \xc0\xaf") == "bad \\xff \\xc0\\xaf");
    // Bidi overrides and isolates, zero-width characters, line separators, the BOM.
    CHECK(escape_control("a\xe2\x80\xae"
                         "b") == "a\\u202eb");
    CHECK(escape_control("\xe2\x81\xa6x\xe2\x81\xa9") == "\\u2066x\\u2069");
    CHECK(escape_control("zw\xe2\x80\x8bsp\xe2\x80\x8d") == "zw\\u200bsp\\u200d");
    CHECK(escape_control("ls\xe2\x80\xa8ps\xe2\x80\xa9") == "ls\\u2028ps\\u2029");
    CHECK(escape_control("\xef\xbb\xbf"
                         "bom") == "\\ufeffbom");
    CHECK(escape_control("alm\xd8\x9c") == "alm\\u061c");
    // Printable text, including non-ASCII, stays as it is; a backslash too.
    CHECK(escape_control("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 \\n") ==
          "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 \\n");
}

TEST_CASE("JSON style escapes format characters as \\u too", "[escape]") {
    std::string out;
    kiqd::append_escaped(out, "q\"\\\x1b\xe2\x80\xae\xff", kiqd::EscapeStyle::json);
    CHECK(out == "q\\\"\\\\\\u001b\\u202e\xef\xbf\xbd");
}

TEST_CASE("display_width counts terminal columns", "[escape]") {
    CHECK(display_width("abc") == 3);
    CHECK(display_width("caf\xc3\xa9") == 4);               // é: 1 column, 2 bytes
    CHECK(display_width("\xe6\x97\xa5\xe6\x9c\xac") == 4);  // 日本: 2 columns each
    CHECK(display_width("e\xcc\x81") == 1);                 // e + combining acute
    CHECK(display_width(escape_control("\x1b[2J")) == 7);   // \x1b[2J
}

TEST_CASE("print_table escapes cells and aligns columns by terminal width", "[escape]") {
    std::ostringstream out;
    kiqd::admin::print_table(out, {"NAME", "NEXT"},
                             {{"plain", "1"},
                              {"caf\xc3\xa9", "2"},
                              {"\xe6\x97\xa5\xe6\x9c\xac", "3"},
                              {"e\xcc\x81", "4"},
                              {"a\x1b[2J\nb", "5"}});
    std::vector<std::string> lines;
    std::istringstream in(out.str());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    REQUIRE(lines.size() == 6);
    CHECK(lines[5] == "a\\x1b[2J\\nb  5");
    // The second column starts at the same terminal column on every line.
    for (const auto& line : lines) {
        INFO(line);
        const auto last_space = line.rfind(' ');
        REQUIRE(last_space != std::string::npos);
        CHECK(display_width(line.substr(0, last_space + 1)) == display_width("a\\x1b[2J\\nb  "));
    }
}

TEST_CASE("shorten cuts between characters, never inside one", "[escape]") {
    const std::string e = "\xc3\xa9";  // é
    std::string s;
    for (int i = 0; i < 70; ++i) s += e;
    const std::string cut = kiqd::admin::shorten(s, 60);
    CHECK(cut.size() == 57 * 2 + 3);
    CHECK(cut.substr(cut.size() - 3) == "...");
    CHECK(escape_control(cut) == cut);  // still valid UTF-8: nothing to escape
    CHECK(kiqd::admin::shorten("short\nline", 60) == "short line");
}
