// Text output of the admin commands: the table layout and the cell formats (see table.hpp).
#include "admin/table.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <iomanip>
#include <sstream>

namespace kiqd::admin {

void print_table(std::ostream& out, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows) {
    std::vector<size_t> width(header.size());
    for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
    for (const auto& r : rows)
        for (size_t i = 0; i < r.size() && i < width.size(); ++i)
            width[i] = std::max(width[i], r[i].size());
    auto line = [&](const std::vector<std::string>& cells) {
        std::string s;
        for (size_t i = 0; i < cells.size(); ++i) {
            s += cells[i];
            if (i + 1 < cells.size()) s += std::string(width[i] - cells[i].size() + 2, ' ');
        }
        out << s << "\n";
    };
    line(header);
    for (const auto& r : rows) line(r);
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

std::string join(const std::vector<std::string>& v, const char* sep) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
    return s;
}

std::string shorten(std::string s, size_t max) {
    for (auto& c : s)
        if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    if (s.size() > max) s = s.substr(0, max - 3) + "...";
    return s;
}

}  // namespace kiqd::admin
