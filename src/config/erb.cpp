// The ERB forms of sidekiq.yml that kiqd understands, expanded before the YAML is parsed:
//   <%= ENV['X'] %>, <%= ENV['X'] || 5 %>, <%= ENV.fetch('X', 5) %>, <%= ENV.fetch('X') { 5 } %>,
//   <%= ENV.fetch('X') %> (an error naming X when it is not set, as Ruby's KeyError),
// each optionally converted as real files do: <%= ENV.fetch('X', 5).to_i %>, <%= ENV['X'].to_i %>
// (Ruby's String#to_i: the leading integer, else 0) and <%= Integer(ENV['X'] || 5) %> (an error
// unless the value is an integer). Anything else is a clear error, not Ruby. Config is built once
// on the main thread, then read-only.
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <regex>

#include "kiqd/config.hpp"

namespace kiqd {
namespace {

std::string trim(const std::string& s) {
    const size_t b = s.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

bool strip(std::string& s, const std::string& prefix, const std::string& suffix) {
    if (s.size() < prefix.size() + suffix.size() || s.compare(0, prefix.size(), prefix) != 0 ||
        s.compare(s.size() - suffix.size(), suffix.size(), suffix) != 0)
        return false;
    s = trim(s.substr(prefix.size(), s.size() - prefix.size() - suffix.size()));
    return true;
}

// The optional sign and digits (with Ruby's single underscores between digits) `s` starts with,
// after leading whitespace; empty when there are none.
std::string leading_integer(const std::string& s, size_t& end) {
    size_t i = s.find_first_not_of(" \t\r\n");
    if (i == std::string::npos) i = s.size();
    std::string out;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) {
        if (s[i] == '-') out.push_back('-');
        ++i;
    }
    const size_t digits_at = out.size();
    for (; i < s.size(); ++i) {
        if (s[i] >= '0' && s[i] <= '9') {
            out.push_back(s[i]);
        } else if (s[i] == '_' && out.size() > digits_at && i + 1 < s.size() && s[i + 1] >= '0' &&
                   s[i + 1] <= '9') {
            continue;
        } else {
            break;
        }
    }
    end = i;
    if (out.size() == digits_at) return "";
    return out;
}

enum class Conversion { none, to_i, integer };

}  // namespace

std::string expand_erb(const std::string& text) {
    // Tags are found by plain string search, not std::regex: libstdc++'s regex engine recurses
    // once per character, so a long unterminated "<%=" overflowed the stack (found by
    // fuzz_config). For the same reason a tag body is matched only when it is short; every
    // supported form fits in kMaxBody.
    constexpr size_t kMaxBody = 1024;
    static const std::string name = R"(['"]([A-Za-z_0-9]+)['"])";
    static const std::string literal = R"((?:['"]([^'"]*)['"]|(-?[0-9.]+)))";
    static const std::regex env_index(R"(^ENV\[\s*)" + name + R"(\s*\]$)");
    static const std::regex env_or(R"(^ENV\[\s*)" + name + R"(\s*\]\s*\|\|\s*)" + literal + "$");
    static const std::regex env_fetch(R"(^ENV\.fetch\(\s*)" + name + R"(\s*,\s*)" + literal +
                                      R"(\s*\)$)");
    static const std::regex env_fetch_block(R"(^ENV\.fetch\(\s*)" + name + R"(\s*\)\s*\{\s*)" +
                                            literal + R"(\s*\}$)");
    static const std::regex env_fetch_bare(R"(^ENV\.fetch\(\s*)" + name + R"(\s*\)$)");
    std::string out;
    size_t pos = 0;
    for (;;) {
        const size_t open = text.find("<%", pos);
        if (open == std::string::npos) break;
        const size_t close = text.find("%>", open + 2);
        if (close == std::string::npos) break;  // unterminated: left as text
        out.append(text, pos, open - pos);
        const int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + open, '\n'));
        const bool print = open + 2 < close && text[open + 2] == '=';
        const size_t body_at = open + 2 + (print ? 1 : 0);
        const std::string raw = text.substr(body_at, close - body_at);
        if (!print)
            throw ConfigError("<% %>", "only <%= ENV[...] %> forms are supported, not Ruby code",
                              line);
        if (raw.size() > kMaxBody)
            throw ConfigError("<%= %>", "unsupported ERB expression (too long)", line);
        std::string body = trim(raw);
        Conversion conversion = Conversion::none;
        if (strip(body, "Integer(", ")")) {
            conversion = Conversion::integer;
        } else if (strip(body, "", ".to_i")) {
            conversion = Conversion::to_i;
            strip(body, "(", ")");  // (ENV['X'] || 5).to_i
        }
        auto env = [](const std::string& var) -> std::optional<std::string> {
            const char* v = std::getenv(var.c_str());
            return v ? std::optional<std::string>(v) : std::nullopt;
        };
        std::smatch e;
        std::optional<std::string> value;  // nullopt: Ruby's nil
        if (std::regex_match(body, e, env_index)) {
            value = env(e[1]);
        } else if (std::regex_match(body, e, env_or) || std::regex_match(body, e, env_fetch) ||
                   std::regex_match(body, e, env_fetch_block)) {
            auto v = env(e[1]);
            value = v && !v->empty() ? *v : (e[2].matched ? e[2].str() : e[3].str());
        } else if (std::regex_match(body, e, env_fetch_bare)) {
            value = env(e[1]);
            if (!value)
                throw ConfigError("<%= %>",
                                  "ENV.fetch('" + e[1].str() +
                                      "'): the environment variable is not set (and the "
                                      "expression gives no default)",
                                  line);
        } else {
            throw ConfigError("<%= %>", "unsupported ERB expression '" + trim(raw) + "'", line);
        }
        size_t end = 0;
        switch (conversion) {
            case Conversion::none:
                out += value.value_or("");
                break;
            case Conversion::to_i: {  // nil.to_i and "abc".to_i are 0
                const std::string digits = value ? leading_integer(*value, end) : "";
                out += digits.empty() ? "0" : digits;
                break;
            }
            case Conversion::integer: {
                const std::string digits = value ? leading_integer(*value, end) : "";
                if (!value || digits.empty() || trim(value->substr(end)) != "")
                    // The value itself is not shown: it comes from the environment and may be
                    // a secret put in the wrong variable.
                    throw ConfigError("<%= %>",
                                      "'" + trim(raw) + "': " +
                                          (value ? "the value is not an integer"
                                                 : "the value is nil (not set, no default)"),
                                      line);
                out += digits;
                break;
            }
        }
        pos = close + 2;
    }
    out.append(text, pos, std::string::npos);
    return out;
}

}  // namespace kiqd
