#pragma once
// A top-level JSON object kept as raw member texts, so that kiqd can add or replace a few
// fields (retry_count, error_message, enqueued_at, ...) while every other member — including
// fields kiqd does not know, written by other tools — comes out byte-for-byte as it went in.
// Parsing, rather than string surgery, keeps nested look-alike keys ("args":[{"queue":…}]) safe.
// A plain value type; not shared between threads.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiqd {

class RawJsonObject {
  public:
    // Returns nullopt and sets *error when the text is not a JSON object.
    static std::optional<RawJsonObject> parse(std::string_view text, std::string* error = nullptr);

    // The raw JSON text of a member's value, or nullptr.
    const std::string* find(std::string_view key) const;
    bool contains(std::string_view key) const { return find(key) != nullptr; }
    // Replaces the member's value in place, or appends the member at the end (as Ruby's Hash#[]=
    // does). value_json must be valid JSON text.
    void set(std::string_view key, std::string value_json);
    void set_string(std::string_view key, std::string_view value);  // JSON-escapes the value
    void erase(std::string_view key);
    std::string dump() const;  // compact, in the original member order

  private:
    struct Member {
        std::string key;        // decoded
        std::string raw_key;    // as written, with quotes
        std::string raw_value;  // as written
    };
    std::vector<Member> members_;
};

// Escapes text as a JSON string literal (with quotes). Invalid UTF-8 is replaced by U+FFFD so
// the result is always valid JSON (error messages can carry arbitrary bytes).
std::string json_string(std::string_view text);

// The deepest nesting of arrays/objects in a JSON text (strings are skipped). Used to refuse
// pathological payloads before a full parse.
size_t json_nesting_depth(std::string_view text);

}  // namespace kiqd
