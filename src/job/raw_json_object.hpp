#pragma once
// A top-level JSON object kept as raw member texts, so that kiqd can add or replace a few
// fields (retry_count, error_message, enqueued_at, ...) while every other member — including
// fields kiqd does not know, written by other tools — comes out byte-for-byte as it went in.
// Parsing, rather than string surgery, keeps nested look-alike keys ("args":[{"queue":…}]) safe.
// A plain value type; not shared between threads.
#include <functional>
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

    struct Member {
        std::string key;        // decoded
        std::string raw_key;    // as written, with quotes
        std::string raw_value;  // as written
    };

  private:
    std::vector<Member> members_;
};

// Escapes text as a JSON string literal (with quotes). Invalid UTF-8 is replaced by U+FFFD so
// the result is always valid JSON (error messages can carry arbitrary bytes).
std::string json_string(std::string_view text);

// The deepest nesting of arrays/objects in a JSON text (strings are skipped). Used to refuse
// pathological payloads before a full parse.
size_t json_nesting_depth(std::string_view text);

// The text of a JSON string token (quotes included) with its escapes decoded ("" when the token
// is not one).
std::string json_unquote(std::string_view token);

// Readers of one part of a JSON text without building a tree of it: each is one pass over the
// part of the text before what it looks for, skipping values unread, and allocates nothing
// (json_unquote aside, for an escaped key). They expect valid JSON (what parse_job or
// RawJsonObject::parse accepted); on anything else they stay within the text and return what
// they found or nothing.
//
// Calls `member(raw_key, raw_value)` for each member of the object `object_text`, in order:
// the key as written (quotes and escapes included), the value's raw text. Nothing when the text
// is not an object.
void for_each_json_member(
    std::string_view object_text,
    const std::function<void(std::string_view raw_key, std::string_view raw_value)>& member);
// The raw text of the member `key` of the object `object_text` (the last of duplicate keys, as
// nlohmann's tree and Ruby's parser keep), or nullopt.
std::optional<std::string_view> json_member_text(std::string_view object_text,
                                                 std::string_view key);
// The raw text of element `index` of the array `array_text`, or nullopt (not an array, or not
// that long).
std::optional<std::string_view> json_element_text(std::string_view array_text, size_t index);

}  // namespace kiqd
