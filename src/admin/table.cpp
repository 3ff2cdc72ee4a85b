// Text output of the admin commands: the table layout and the cell formats (see table.hpp).
#include "admin/table.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <iomanip>
#include <sstream>

#include "common/control_escape.hpp"

namespace kiqd::admin {

std::string json_text(const ojson& j) {
    return j.dump(-1, ' ', true, ojson::error_handler_t::replace);
}

void print_table(std::ostream& out, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows, bool headers) {
    struct Cell {
        std::string text;  // escaped
        size_t width;      // in terminal columns
    };
    auto escaped = [](const std::vector<std::string>& cells) {
        std::vector<Cell> row;
        for (const auto& c : cells) {
            std::string text = escape_control(c);
            const size_t width = display_width(text);
            row.push_back({std::move(text), width});
        }
        return row;
    };
    std::vector<std::vector<Cell>> lines{escaped(header)};
    for (const auto& r : rows) lines.push_back(escaped(r));
    std::vector<size_t> width(header.size());
    for (const auto& l : lines)
        for (size_t i = 0; i < l.size() && i < width.size(); ++i)
            width[i] = std::max(width[i], l[i].width);
    for (size_t n = headers ? 0 : 1; n < lines.size(); ++n) {
        const auto& l = lines[n];
        std::string s;
        for (size_t i = 0; i < l.size(); ++i) {
            s += l[i].text;
            if (i + 1 < l.size() && i < width.size())
                s += std::string(width[i] - l[i].width + 2, ' ');
        }
        out << s << "\n";
    }
}

std::string fixed(double v, int decimals) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(decimals) << v;
    return s.str();
}

std::string human_duration(double seconds) {
    const double a = std::fabs(seconds);
    std::string s;
    if (a < 60)
        s = fixed(a, a < 10 ? 2 : 1) + " s";
    else if (a < 3600)
        s = fixed(a / 60, 1) + " min";
    else if (a < 86400)
        s = fixed(a / 3600, 1) + " h";
    else
        s = fixed(a / 86400, 1) + " d";
    return seconds < 0 ? "-" + s : s;
}

std::string utc_time(double epoch) {
    const std::time_t t = static_cast<std::time_t>(epoch);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

std::string time_cell(double epoch, double now, bool due) {
    const double ahead = epoch - now;
    std::string when;
    if (ahead >= 0)
        when = "in " + human_duration(ahead);
    else
        when = (due ? "overdue " : "") + human_duration(-ahead) + (due ? "" : " ago");
    return utc_time(epoch) + " (" + when + ")";
}

void put_time(ojson& j, const std::string& name, double epoch) {
    j[name] = epoch;
    j[name + "_iso"] = utc_time(epoch);
}

std::string join(const std::vector<std::string>& v, const char* sep) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
    return s;
}

std::string shorten(std::string s, size_t max) {
    for (auto& c : s)
        if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    // Count characters (a byte that is not UTF-8 counts as one) and cut after the (max − 3)th.
    size_t characters = 0, cut = s.size();
    for (size_t i = 0; i < s.size(); ++characters) {
        if (characters == max - 3) cut = i;
        char32_t cp = 0;
        i += std::max<size_t>(1, utf8_sequence(s, i, cp));
    }
    if (characters > max) s = s.substr(0, cut) + "...";
    return s;
}

}  // namespace kiqd::admin
