#pragma once
// Escaping of text kiqd did not write itself (job payloads, Redis keys and values, exec output,
// configuration values) before it reaches a log line or a terminal: every character a terminal
// or a log reader would act on, and every invisible one that makes two different strings look
// alike or reorders what is shown, becomes a visible escape; printable UTF-8 passes unchanged.
// The one implementation behind the log formatter (server/logging.cpp) and the admin command
// line's output (admin/). Pure functions, callable from any thread.
#include <cstddef>
#include <string>
#include <string_view>

namespace kiqd {

enum class EscapeStyle {
    // A terminal or a text log line: \n \r \t as those two characters; other C0 controls, DEL
    // and bytes that are not UTF-8 as \xNN; C1 controls (U+0080-U+009F, which some terminals
    // obey) and the format characters below as \uNNNN. A backslash is not escaped.
    text,
    // The inside of a JSON string: " and \ escaped, every control (C0, DEL, C1) and format
    // character as \uNNNN, bytes that are not UTF-8 replaced by U+FFFD, so the result parses.
    json,
};
// Format characters escaped in both styles: the bidirectional controls (U+061C, U+200E/F,
// U+202A-U+202E, U+2066-U+2069, which reorder the text after them), the zero-width and invisible
// characters (U+180E, U+200B-U+200D, U+2060-U+2064, U+206A-U+206F, U+FEFF), the line and
// paragraph separators U+2028/U+2029 (a line break to some viewers) and the interlinear
// annotation controls U+FFF9-U+FFFB.

// Appends `s` to `out`, escaped in `style`.
void append_escaped(std::string& out, std::string_view s, EscapeStyle style);

// `s` escaped for a terminal (EscapeStyle::text): the result is printable UTF-8 without line
// breaks.
std::string escape_control(std::string_view s);

// The number of terminal columns that printable UTF-8 (escape_control's output) takes: 2 for
// an East Asian wide or fullwidth character, 0 for a combining mark, 1 for any other; a byte that
// is not UTF-8 counts 1.
size_t display_width(std::string_view s);

// The length of the well-formed UTF-8 sequence at s[i] (1 to 4 bytes), with its code point in
// `cp`; 0 when s[i] starts none: a stray continuation byte, an overlong form, a surrogate, a
// value beyond U+10FFFF, or a sequence cut short. Requires i < s.size().
size_t utf8_sequence(std::string_view s, size_t i, char32_t& cp);

}  // namespace kiqd
