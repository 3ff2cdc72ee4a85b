// The shared YAML readers of the config sections, and ConfigError's message format.
// Run only on the main thread while the config is built.
#include "config/yaml_helpers.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <stdexcept>

namespace kiqd {
namespace {

// Control bytes (a NUL in a quoted YAML key, say) would cut or garble the message on a terminal
// or in the journal: show them as \xNN.
std::string printable(const std::string& text) {
    std::string out;
    for (unsigned char c : text) {
        if (c < 0x20 || c == 0x7f)
            out += fmt::format("\\x{:02x}", c);
        else
            out += static_cast<char>(c);
    }
    return out;
}

}  // namespace

ConfigError::ConfigError(std::string key, std::string message, int line)
    : std::runtime_error(printable(key) + (line > 0 ? " (line " + std::to_string(line) + ")" : "") +
                         ": " + printable(message)),
      key_(std::move(key)),
      line_(line) {}

namespace config_detail {

int line_of(const YAML::Node& n) {
    return n.Mark().line >= 0 ? n.Mark().line + 1 : -1;
}

std::string normalize_key(std::string key) {
    // A lone ":" stays as it is, so that every error names a key.
    if (key.size() > 1 && key.front() == ':') key.erase(0, 1);
    return key;
}

void type_error(const std::string& key, const YAML::Node& n, const char* expected) {
    throw ConfigError(key, std::string("must be ") + expected, line_of(n));
}

std::string as_string(const std::string& key, const YAML::Node& n) {
    if (!n.IsScalar()) type_error(key, n, "a string");
    return n.Scalar();
}

long long as_int(const std::string& key, const YAML::Node& n) {
    if (!n.IsScalar()) type_error(key, n, "an integer");
    try {
        size_t used = 0;
        long long v = std::stoll(n.Scalar(), &used);
        if (used != n.Scalar().size()) throw std::invalid_argument("trailing");
        return v;
    } catch (const std::exception&) {
        type_error(key, n, "an integer");
    }
}

double as_number(const std::string& key, const YAML::Node& n) {
    if (!n.IsScalar()) type_error(key, n, "a number");
    try {
        size_t used = 0;
        double v = std::stod(n.Scalar(), &used);
        if (used != n.Scalar().size()) throw std::invalid_argument("trailing");
        return v;
    } catch (const std::exception&) {
        type_error(key, n, "a number");
    }
}

bool as_bool(const std::string& key, const YAML::Node& n) {
    if (!n.IsScalar()) type_error(key, n, "true or false");
    const auto& s = n.Scalar();
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off") return false;
    type_error(key, n, "true or false");
}

std::string strip_symbol(std::string s) {
    if (!s.empty() && s.front() == ':') s.erase(0, 1);
    return s;
}

std::string as_symbol(const std::string& key, const YAML::Node& n, const char* expected) {
    if (!n.IsScalar()) type_error(key, n, expected);
    return strip_symbol(n.Scalar());
}

std::string max_duration_text() {
    return "must be at most " + std::to_string(kMaxDurationSeconds) + " seconds (366 days)";
}

void check_duration(const std::string& key, double seconds, const YAML::Node& n) {
    if (!std::isfinite(seconds)) throw ConfigError(key, "is out of range", line_of(n));
    // Longer than a year is a typo; far longer (9999999999) overflowed the deadline arithmetic
    // (now + timeout) into the past, so a job "timed out" at once.
    if (seconds > static_cast<double>(kMaxDurationSeconds))
        throw ConfigError(key, max_duration_text(), line_of(n));
    if (seconds < -static_cast<double>(kMaxDurationSeconds))
        throw ConfigError(key, "is out of range", line_of(n));
}

long long seconds_to_ms(const std::string& key, const YAML::Node& n) {
    const double seconds = as_number(key, n);
    check_duration(key, seconds, n);
    return static_cast<long long>(seconds * 1000.0);
}

long long whole_seconds(const std::string& key, const YAML::Node& n) {
    const long long seconds = as_int(key, n);
    check_duration(key, static_cast<double>(seconds), n);
    return seconds;
}

double seconds_number(const std::string& key, const YAML::Node& n) {
    const double seconds = as_number(key, n);
    check_duration(key, seconds, n);
    return seconds;
}

std::chrono::milliseconds positive_seconds(const std::string& key, const YAML::Node& n) {
    const long long ms = seconds_to_ms(key, n);
    if (ms <= 0) throw ConfigError(key, "must be greater than 0", line_of(n));
    return std::chrono::milliseconds(ms);
}

std::string non_empty_string(const std::string& key, const YAML::Node& n) {
    std::string s = as_string(key, n);
    if (s.empty()) throw ConfigError(key, "is empty", line_of(n));
    return s;
}

void check_queue_name(const std::string& key, const std::string& name, int line) {
    static const std::regex queue_name(R"(^[A-Za-z0-9_:.\-]+$)");
    if (!std::regex_match(name, queue_name))
        throw ConfigError(key, "invalid queue name '" + name + "' (letters, digits, _ : . - only)",
                          line);
}

void read_map(const YAML::Node& section, const std::string& prefix,
              std::initializer_list<KeyReader> readers, const char* unknown,
              const OtherKeyReader& other) {
    for (const auto& kv : section) {
        // Not a string (a list as a key, say): Scalar() is "", which no reader is named.
        const std::string name = normalize_key(kv.first.Scalar());
        const std::string key = prefix.empty() ? name : prefix + "." + name;
        const auto reader = std::find_if(readers.begin(), readers.end(),
                                         [&](const KeyReader& r) { return r.name == name; });
        if (reader != readers.end())
            reader->read(key, kv.second);
        else if (!other || !other(name, key, kv.first, kv.second))
            throw ConfigError(key, unknown, line_of(kv.first));
    }
}

}  // namespace config_detail
}  // namespace kiqd
