#include "common/log_fields.hpp"

#include <fmt/format.h>

#include <atomic>
#include <charconv>
#include <cmath>

namespace kiqd {
namespace {

std::atomic<bool> structured{false};

// The JSON form: kStart, then per field: key, kKey, 's' or 'n', decimal length, ':', value;
// then kEvent and the event. Lengths make any bytes in a value safe; the decoder accepts only
// this exact shape, so a job's text that starts with the same byte is logged as plain text.
constexpr char kStart = '\x1d';
constexpr char kKey = '\x1f';
constexpr char kEvent = '\x1e';

// Keys the formatter writes itself; a field may not shadow them.
bool reserved(std::string_view key) {
    return key == "ts" || key == "level" || key == "pid" || key == "tid" || key == "msg";
}

bool valid_key(std::string_view key) {
    if (key.empty() || key.size() > 64 || reserved(key)) return false;
    for (char c : key)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
    return true;
}

// A JSON number exactly as written (no leading '+', no "inf"/"nan", no hex).
bool json_number_text(std::string_view v) {
    if (v.empty() || v.size() > 32) return false;
    double d = 0;
    const char* end = v.data() + v.size();
    auto [ptr, ec] = std::from_chars(v.data(), end, d);
    if (ec != std::errc() || ptr != end || !std::isfinite(d)) return false;
    const size_t digit = v[0] == '-' ? 1 : 0;
    if (digit >= v.size() || v[digit] < '0' || v[digit] > '9') return false;
    // JSON forbids leading zeros ("01") and a bare trailing point ("1.").
    if (v[digit] == '0' && digit + 1 < v.size() && v[digit + 1] >= '0' && v[digit + 1] <= '9')
        return false;
    return v.back() >= '0' && v.back() <= '9';
}

}  // namespace

void set_structured_log_lines(bool on) noexcept {
    structured.store(on, std::memory_order_relaxed);
}
bool structured_log_lines() noexcept {
    return structured.load(std::memory_order_relaxed);
}

LogLine& LogLine::field(std::string_view key, std::string_view value) {
    fields_.push_back({std::string(key), std::string(value), false, true});
    return *this;
}

LogLine& LogLine::json_field(std::string_view key, std::string_view value) {
    fields_.push_back({std::string(key), std::string(value), false, false});
    return *this;
}

LogLine& LogLine::json_number(std::string_view key, double value) {
    fields_.push_back({std::string(key), fmt::format("{:.3f}", value), true, false});
    return *this;
}

LogLine& LogLine::tags(std::string_view logfmt) {
    tags_.append(logfmt);
    return *this;
}

std::string LogLine::message(std::string_view event, std::string_view text) const {
    std::string out;
    if (!structured_log_lines()) {
        for (const Field& f : fields_) {
            if (!f.in_text) continue;
            out.append(f.key).append(1, '=').append(f.value).append(1, ' ');
        }
        out.append(text).append(tags_);
        return out;
    }
    out.push_back(kStart);
    auto append = [&out](std::string_view key, std::string_view value, bool number) {
        out.append(key).push_back(kKey);
        out.push_back(number ? 'n' : 's');
        out.append(std::to_string(value.size())).push_back(':');
        out.append(value);
    };
    for (const Field& f : fields_) append(f.key, f.value, f.number);
    // Tags: space-separated key=value words written by kiqd's middleware.
    std::string_view rest = tags_;
    while (!rest.empty()) {
        const size_t start = rest.find_first_not_of(' ');
        if (start == std::string_view::npos) break;
        rest.remove_prefix(start);
        const size_t end = std::min(rest.find(' '), rest.size());
        const std::string_view word = rest.substr(0, end);
        rest.remove_prefix(end);
        const size_t eq = word.find('=');
        if (eq == std::string_view::npos) continue;
        const std::string_view value = word.substr(eq + 1);
        append(word.substr(0, eq), value, json_number_text(value));
    }
    out.push_back(kEvent);
    out.append(event);
    return out;
}

std::optional<DecodedLogLine> decode_log_line(std::string_view m) {
    if (m.empty() || m[0] != kStart) return std::nullopt;
    DecodedLogLine line;
    size_t i = 1;
    while (i < m.size() && m[i] != kEvent) {
        const size_t key_end = m.find(kKey, i);
        if (key_end == std::string_view::npos || key_end + 2 >= m.size()) return std::nullopt;
        const std::string_view key = m.substr(i, key_end - i);
        const char kind = m[key_end + 1];
        if (!valid_key(key) || (kind != 's' && kind != 'n')) return std::nullopt;
        size_t length = 0;
        const char* first = m.data() + key_end + 2;
        auto [ptr, ec] = std::from_chars(first, m.data() + m.size(), length);
        if (ec != std::errc() || ptr == first || ptr == m.data() + m.size() || *ptr != ':')
            return std::nullopt;
        const size_t value_at = static_cast<size_t>(ptr - m.data()) + 1;
        if (length > m.size() - value_at) return std::nullopt;
        const std::string_view value = m.substr(value_at, length);
        if (kind == 'n' && !json_number_text(value)) return std::nullopt;
        line.fields.push_back({key, value, kind == 'n'});
        i = value_at + length;
    }
    if (i >= m.size()) return std::nullopt;
    line.event = m.substr(i + 1);
    return line;
}

}  // namespace kiqd
