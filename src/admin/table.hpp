#pragma once
// Output of the admin commands: a plain text table with left-aligned columns, the number,
// duration and time formats its cells use, and the JSON type of --json. Pure functions on
// strings and streams; the admin CLI is single-threaded.
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace kiqd::admin {

using ojson = nlohmann::ordered_json;  // --json output keeps the order fields are listed in

// A plain text table: a header row and left-aligned columns two spaces apart.
void print_table(std::ostream& out, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows);

// `v` with exactly `decimals` digits after the point ("0.25").
std::string fixed(double v, int decimals);

// "4.2 s", "3 min", "2.5 h", "3.1 d": how long ago or how long, for humans.
std::string human_duration(double seconds);

// "2026-11-22T15:00:00Z": epoch seconds as UTC, whole seconds.
std::string utc_time(double epoch);

std::string join(const std::vector<std::string>& v, const char* sep);

// `s` on one line (newlines and tabs become spaces), cut to `max` characters with "...".
std::string shorten(std::string s, size_t max);

}  // namespace kiqd::admin
