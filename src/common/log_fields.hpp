#pragma once
// LogLine: one log line that carries named fields (class, jid, queue, elapsed_ms, urgency, …).
// With `logging.format: text` the fields are written in front of the words, as `key=value`, the
// line kiqd has always written. With `format: json` they are encoded in the message (a private,
// length-prefixed form no job text can break out of) and the JSON formatter of server/logging.cpp
// turns them into keys of the line's object, so that log pipelines filter on `jid` or `class`
// instead of parsing `msg`. Which form is chosen once, when the logger is made
// (set_structured_log_lines); LogLine itself is a value built and used on one thread.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiqd {

// Whether LogLine::message encodes fields for the JSON formatter (true) or writes the text form.
// Set by make_logger before any other thread logs; read by any thread.
void set_structured_log_lines(bool structured) noexcept;
bool structured_log_lines() noexcept;

class LogLine {
  public:
    // A field both forms show: `key=value ` in front of a text line, a key in JSON.
    LogLine& field(std::string_view key, std::string_view value);
    // Fields only JSON shows (the text line already says them in its words).
    LogLine& json_field(std::string_view key, std::string_view value);
    LogLine& json_number(std::string_view key, double value);
    // ` key=value key=value` tags (JobContext::log_tags): appended to a text line as they are,
    // keys in JSON (numbers where the value is one).
    LogLine& tags(std::string_view logfmt);

    // What to hand to the logger: in text form "<fields> <text><tags>"; in JSON form the fields
    // with `event` as the line's "msg".
    std::string message(std::string_view event, std::string_view text) const;

  private:
    struct Field {
        std::string key;
        std::string value;
        bool number = false;
        bool in_text = true;
    };
    std::vector<Field> fields_;
    std::string tags_;
};

// A message decoded from LogLine's JSON form: "msg" and the fields in order. nullopt when
// `message` is not one (every other log line), or is malformed.
struct DecodedLogLine {
    std::string_view event;
    struct Field {
        std::string_view key;
        std::string_view value;
        bool number;
    };
    std::vector<Field> fields;
};
std::optional<DecodedLogLine> decode_log_line(std::string_view message);

}  // namespace kiqd
