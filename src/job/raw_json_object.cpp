#include "job/raw_json_object.hpp"

#include <nlohmann/json.hpp>

#include "job/json_scan.hpp"

namespace kiqd {
namespace {

size_t skip_ws(std::string_view s, size_t i) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
    return i;
}

// s[i] is '"'; returns the index just past the closing quote.
size_t skip_string(std::string_view s, size_t i) {
    for (++i; i < s.size(); ++i) {
        if (s[i] == '\\')
            ++i;
        else if (s[i] == '"')
            return i + 1;
    }
    return s.size();
}

// Returns the index just past the value starting at s[i] (the text is known to be valid JSON).
size_t skip_value(std::string_view s, size_t i) {
    if (s[i] == '"') return skip_string(s, i);
    if (s[i] == '{' || s[i] == '[') {
        int depth = 0;
        while (i < s.size()) {
            char c = s[i];
            if (c == '"') {
                i = skip_string(s, i);
                continue;
            }
            if (c == '{' || c == '[') ++depth;
            if (c == '}' || c == ']') {
                if (--depth == 0) return i + 1;
            }
            ++i;
        }
        return i;
    }
    while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' &&
           s[i] != '\t' && s[i] != '\n' && s[i] != '\r')
        ++i;
    return i;
}

}  // namespace

size_t json_nesting_depth(std::string_view text) {
    size_t depth = 0, max_depth = 0;
    for (size_t i = 0; i < text.size();) {
        char c = text[i];
        if (c == '"') {
            i = skip_string(text, i);
            continue;
        }
        if (c == '{' || c == '[') max_depth = std::max(max_depth, ++depth);
        if ((c == '}' || c == ']') && depth > 0) --depth;
        ++i;
    }
    return max_depth;
}

std::optional<RawJsonObject> RawJsonObject::parse(std::string_view text, std::string* error) {
    auto fail = [&](std::string msg) -> std::optional<RawJsonObject> {
        if (error) *error = std::move(msg);
        return std::nullopt;
    };
    // The same verdict as parse_job's: a payload it refused is not edited here either, and one
    // it accepted always is.
    if (auto lenient = nlohmann_leniency(text)) return fail(std::move(*lenient));
    if (!nlohmann::json::accept(text.begin(), text.end())) return fail("not valid JSON");
    size_t i = skip_ws(text, 0);
    if (i >= text.size() || text[i] != '{') return fail("not a JSON object");
    RawJsonObject obj;
    i = skip_ws(text, i + 1);
    if (text[i] == '}') return obj;
    while (i < text.size()) {
        size_t key_end = skip_string(text, i);
        Member m;
        m.raw_key = std::string(text.substr(i, key_end - i));
        m.key = nlohmann::json::parse(m.raw_key).get<std::string>();
        i = skip_ws(text, key_end);
        i = skip_ws(text, i + 1);  // ':'
        size_t value_end = skip_value(text, i);
        m.raw_value = std::string(text.substr(i, value_end - i));
        obj.members_.push_back(std::move(m));
        i = skip_ws(text, value_end);
        if (text[i] == '}') break;
        i = skip_ws(text, i + 1);  // ','
    }
    return obj;
}

const std::string* RawJsonObject::find(std::string_view key) const {
    // A duplicate key is legal JSON; like Ruby's parser, the last one wins.
    for (auto it = members_.rbegin(); it != members_.rend(); ++it)
        if (it->key == key) return &it->raw_value;
    return nullptr;
}

void RawJsonObject::set(std::string_view key, std::string value_json) {
    for (auto it = members_.rbegin(); it != members_.rend(); ++it) {
        if (it->key == key) {
            it->raw_value = std::move(value_json);
            return;
        }
    }
    members_.push_back({std::string(key), json_string(key), std::move(value_json)});
}

void RawJsonObject::set_string(std::string_view key, std::string_view value) {
    set(key, json_string(value));
}

void RawJsonObject::erase(std::string_view key) {
    std::erase_if(members_, [&](const Member& m) { return m.key == key; });
}

std::string RawJsonObject::dump() const {
    std::string out = "{";
    for (size_t i = 0; i < members_.size(); ++i) {
        if (i) out += ',';
        out += members_[i].raw_key;
        out += ':';
        out += members_[i].raw_value;
    }
    out += '}';
    return out;
}

std::string json_string(std::string_view text) {
    return nlohmann::json(std::string(text))
        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kiqd
