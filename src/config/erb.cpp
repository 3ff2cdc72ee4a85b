// The ERB forms of sidekiq.yml that kiqd understands (<%= ENV[...] %> and its fallbacks),
// expanded before the YAML is parsed. Config is built once on the main thread, then read-only.
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <regex>

#include "kiqd/config.hpp"

namespace kiqd {

std::string expand_erb(const std::string& text) {
    // Tags are found by plain string search, not std::regex: libstdc++'s regex engine recurses
    // once per character, so a long unterminated "<%=" overflowed the stack (found by
    // fuzz_config). For the same reason a tag body is matched only when it is short; every
    // supported form fits in kMaxBody.
    constexpr size_t kMaxBody = 1024;
    static const std::regex env_index(R"(^\s*ENV\[\s*['"]([A-Za-z_0-9]+)['"]\s*\]\s*$)");
    static const std::regex env_or(
        R"(^\s*ENV\[\s*['"]([A-Za-z_0-9]+)['"]\s*\]\s*\|\|\s*(?:['"]([^'"]*)['"]|(-?[0-9.]+))\s*$)");
    static const std::regex env_fetch(
        R"(^\s*ENV\.fetch\(\s*['"]([A-Za-z_0-9]+)['"]\s*,\s*(?:['"]([^'"]*)['"]|(-?[0-9.]+))\s*\)\s*$)");
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
        const std::string body = text.substr(body_at, close - body_at);
        std::smatch e;
        auto env = [](const std::string& name) -> std::optional<std::string> {
            const char* v = std::getenv(name.c_str());
            return v ? std::optional<std::string>(v) : std::nullopt;
        };
        if (!print) {
            throw ConfigError("<% %>", "only <%= ENV[...] %> forms are supported, not Ruby code",
                              line);
        } else if (body.size() > kMaxBody) {
            throw ConfigError("<%= %>", "unsupported ERB expression (too long)", line);
        } else if (std::regex_match(body, e, env_index)) {
            out += env(e[1]).value_or("");
        } else if (std::regex_match(body, e, env_or) || std::regex_match(body, e, env_fetch)) {
            auto v = env(e[1]);
            out += v && !v->empty() ? *v : (e[2].matched ? e[2].str() : e[3].str());
        } else {
            throw ConfigError("<%= %>", "unsupported ERB expression '" + body + "'", line);
        }
        pos = close + 2;
    }
    out.append(text, pos, std::string::npos);
    return out;
}

}  // namespace kiqd
