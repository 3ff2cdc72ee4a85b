#pragma once
// Output of the admin commands: a plain text table with left-aligned columns, the number,
// duration and time formats its cells use, and the JSON type of --json. Every string from Redis
// reaches the terminal escaped (common/control_escape.hpp): the table escapes its cells, and
// --json output is ASCII with every control escaped. Pure functions on strings and streams; the
// admin CLI is single-threaded.
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace kiqd::admin {

using ojson = nlohmann::ordered_json;  // --json output keeps the order fields are listed in

// --json output: `j` on one line, all ASCII (every other character, controls and DEL as \uNNNN),
// bytes that are not UTF-8 replaced by U+FFFD instead of throwing.
std::string json_text(const ojson& j);

// A plain text table: a header row and left-aligned columns two spaces apart. Cells are escaped
// (escape_control) and columns sized by the terminal width of the escaped text, so wide and
// combining characters keep them aligned.
// `headers` false (--no-headers): the rows only, sized as if the header were there.
void print_table(std::ostream& out, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows, bool headers = true);

// A listing: with `json`, one JSON array of to_json(item); else a table of to_row(item) under
// `header` (without it when `headers` is false).
template <class Item, class ToJson, class ToRow>
void print_listing(std::ostream& out, bool json, bool headers, const std::vector<Item>& items,
                   ToJson to_json, const std::vector<std::string>& header, ToRow to_row) {
    if (json) {
        ojson a = ojson::array();
        for (const auto& item : items) a.push_back(to_json(item));
        out << json_text(a) << "\n";
        return;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& item : items) rows.push_back(to_row(item));
    print_table(out, header, rows, headers);
}

// `v` with exactly `decimals` digits after the point ("0.25").
std::string fixed(double v, int decimals);

// "4.2 s", "3 min", "2.5 h", "3.1 d": how long ago or how long, for humans.
std::string human_duration(double seconds);

// "2026-11-22T15:00:00Z": epoch seconds as UTC, whole seconds.
std::string utc_time(double epoch);

// A time in a table cell: ISO 8601 and how far from now, "2026-11-22T15:00:00Z (in 5.0 min)" or
// "... (3.0 min ago)". `due` for an entry that runs at that time (a retry, a scheduled job):
// one whose time has passed is "(overdue 3.0 s)" (waiting for the scheduler's next poll),
// not "in -3 s".
std::string time_cell(double epoch, double now, bool due = false);

// For --json: a time as {"<name>": epoch seconds, "<name>_iso": ISO 8601} members of `j`.
void put_time(ojson& j, const std::string& name, double epoch);

std::string join(const std::vector<std::string>& v, const char* sep);

// `s` on one line (newlines and tabs become spaces), cut to `max` characters (never inside a
// UTF-8 sequence) with "...". Not escaped: print_table does that.
std::string shorten(std::string s, size_t max);

}  // namespace kiqd::admin
