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

namespace {

// Collects the members json_scan reports, as RawJsonObject keeps them.
class MemberCollector final : public JsonMemberVisitor {
  public:
    explicit MemberCollector(std::vector<RawJsonObject::Member>& members) : members_(members) {}
    void member(std::string_view key, std::string_view value) override {
        members_.push_back({json_unquote(key), std::string(key), std::string(value)});
    }

  private:
    std::vector<RawJsonObject::Member>& members_;
};

// Deeper payloads are judged by nlohmann below, which does not recurse.
constexpr size_t kScanDepthLimit = 256;

}  // namespace

std::optional<RawJsonObject> RawJsonObject::parse(std::string_view text, std::string* error) {
    auto fail = [&](std::string msg) -> std::optional<RawJsonObject> {
        if (error) *error = std::move(msg);
        return std::nullopt;
    };
    // The fast path: json_scan is trusted to accept only what nlohmann accepts, and reads the
    // members in the same pass. The scheduler edits every due job this way, so this is most of
    // what moving a backlog costs kiqd.
    {
        RawJsonObject obj;
        MemberCollector collector(obj.members_);
        const auto scan = json_scan(text, &collector, kScanDepthLimit);
        if (scan.valid && scan.is_object) return obj;
    }
    // Refused by the fast path: the same verdict as parse_job's slow path, and its messages. A
    // payload parse_job refused is not edited here either, and one it accepted always is.
    if (auto lenient = nlohmann_leniency(text)) return fail(std::move(*lenient));
    if (!nlohmann::json::accept(text.begin(), text.end())) return fail("not valid JSON");
    const size_t i = skip_ws(text, 0);
    if (i >= text.size() || text[i] != '{') return fail("not a JSON object");
    RawJsonObject obj;
    MemberCollector collector(obj.members_);
    for_each_json_member(text, [&](std::string_view raw_key, std::string_view raw_value) {
        collector.member(raw_key, raw_value);
    });
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

std::string json_unquote(std::string_view token) {
    if (token.size() >= 2 && token.find('\\') == std::string_view::npos)
        return std::string(token.substr(1, token.size() - 2));
    // Not thrown on: the readers below promise to stay quiet on text that is not JSON.
    const auto decoded = nlohmann::json::parse(token, nullptr, false);
    return decoded.is_string() ? decoded.get<std::string>() : std::string();
}

void for_each_json_member(
    std::string_view text,
    const std::function<void(std::string_view raw_key, std::string_view raw_value)>& member) {
    size_t i = skip_ws(text, 0);
    if (i >= text.size() || text[i] != '{') return;
    i = skip_ws(text, i + 1);
    while (i < text.size() && text[i] == '"') {
        const size_t key_end = skip_string(text, i);
        const std::string_view raw_key = text.substr(i, key_end - i);
        i = skip_ws(text, key_end);
        if (i >= text.size() || text[i] != ':') return;
        i = skip_ws(text, i + 1);
        if (i >= text.size()) return;
        const size_t value_end = skip_value(text, i);
        member(raw_key, text.substr(i, value_end - i));
        i = skip_ws(text, value_end);
        if (i >= text.size() || text[i] != ',') return;  // '}': the last member
        i = skip_ws(text, i + 1);
    }
}

std::optional<std::string_view> json_member_text(std::string_view object_text,
                                                 std::string_view key) {
    std::optional<std::string_view> found;
    for_each_json_member(object_text, [&](std::string_view raw_key, std::string_view raw_value) {
        // Most keys have no escapes: compared in place, without decoding.
        const bool plain = raw_key.find('\\') == std::string_view::npos;
        if (plain ? raw_key.substr(1, raw_key.size() - 2) == key : json_unquote(raw_key) == key)
            found = raw_value;
    });
    return found;
}

std::optional<std::string_view> json_element_text(std::string_view text, size_t index) {
    size_t i = skip_ws(text, 0);
    if (i >= text.size() || text[i] != '[') return std::nullopt;
    i = skip_ws(text, i + 1);
    for (size_t n = 0; i < text.size() && text[i] != ']'; ++n) {
        const size_t value_end = skip_value(text, i);
        if (n == index) return text.substr(i, value_end - i);
        i = skip_ws(text, value_end);
        if (i >= text.size() || text[i] != ',') return std::nullopt;
        i = skip_ws(text, i + 1);
    }
    return std::nullopt;
}

std::string json_string(std::string_view text) {
    return nlohmann::json(std::string(text))
        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kiqd
