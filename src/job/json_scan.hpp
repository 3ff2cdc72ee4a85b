#pragma once
// JsonScan: the fast path of parse_job. One pass over a payload that checks it is strict JSON
// (RFC 8259, UTF-8 as RFC 3629 — what nlohmann's lexer accepts) without allocating, and hands
// each member of a top-level object to a visitor as raw token texts. nlohmann's SAX lexer, which
// kiqd used before, copies every string character by character into a token buffer; on a no-op
// drain this scan does the same check in a fraction of the time.
// It is only trusted to accept: parse_job sends anything it refuses through nlohmann, whose
// verdict and message count — after nlohmann_leniency has refused what nlohmann would let
// through and JSON does not, so that both give one verdict. Plain functions; no state is shared
// between calls.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace kiqd {

class JsonMemberVisitor {
  public:
    virtual ~JsonMemberVisitor() = default;
    // A member of the top-level object: `key` is the string token with its quotes (it may hold
    // escapes), `value` the raw text of its value.
    virtual void member(std::string_view key, std::string_view value) = 0;
};

struct JsonScanResult {
    bool valid = false;      // the whole text is one JSON value, surrounded only by whitespace
    bool is_object = false;  // ... and that value is an object
    size_t max_depth = 0;    // deepest nesting of objects and arrays
    bool too_deep = false;   // stopped (valid = false) at a nesting deeper than the limit
};

// Members are reported as they are read, so when the text turns out invalid the visitor has
// seen a prefix of them: the caller must then discard what it collected. The scan recurses, so
// it stops at `depth_limit` levels of nesting (the stack stays small whatever the input).
JsonScanResult json_scan(std::string_view text, JsonMemberVisitor* visitor, size_t depth_limit);

// The two things nlohmann's lexer lets through that JSON (RFC 8259) refuses: a UTF-8 byte-order
// mark before the text, which it skips, and a NUL byte, which it reads as the end of the input
// ("{...}\0junk" passes). Ruby's JSON.parse refuses both, so Sidekiq sends such a payload to the
// dead set; json_scan refuses them by itself. Every nlohmann parse that judges a payload
// (parse_job's slow path, RawJsonObject::parse) asks this first, so that kiqd's readers cannot
// disagree — a job run by one and unreadable to the next loses fields on its way to the retry
// set. Returns why the text is refused, or nullopt when nlohmann's verdict can be trusted.
std::optional<std::string> nlohmann_leniency(std::string_view text);

}  // namespace kiqd
