// Escaping of control and format characters for logs and terminals (see control_escape.hpp).
#include "common/control_escape.hpp"

#include <locale.h>
#include <wchar.h>

namespace kiqd {
namespace {

bool printable_ascii(char c) {
    return c >= 0x20 && c < 0x7f;  // false for every byte >= 0x80
}

// Invisible characters that reorder, join or break the text around them (control_escape.hpp).
bool format_character(char32_t cp) {
    return cp == 0x061C || cp == 0x180E || (cp >= 0x200B && cp <= 0x200F) ||
           (cp >= 0x2028 && cp <= 0x202E) || (cp >= 0x2060 && cp <= 0x2064) ||
           (cp >= 0x2066 && cp <= 0x206F) || cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB);
}

const char* named_escape(char32_t cp, EscapeStyle style) {
    const bool json = style == EscapeStyle::json;
    switch (cp) {
        case '\n':
            return "\\n";
        case '\r':
            return "\\r";
        case '\t':
            return "\\t";
        case '"':
            return json ? "\\\"" : nullptr;
        case '\\':
            return json ? "\\\\" : nullptr;
        default:
            return nullptr;
    }
}

// `prefix` followed by `digits` lower-case hex digits of `value`.
void append_hex(std::string& out, std::string_view prefix, char32_t value, int digits) {
    static const char* hex = "0123456789abcdef";
    out += prefix;
    for (int shift = 4 * (digits - 1); shift >= 0; shift -= 4) out += hex[(value >> shift) & 0xf];
}

// glibc's wcwidth under the C.UTF-8 locale (always installed with Debian's libc-bin), whatever
// the process's own locale is; nullptr when it is missing, and every character then counts 1.
locale_t utf8_locale() {
    static const locale_t locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", locale_t(0));
    return locale;
}

}  // namespace

size_t utf8_sequence(std::string_view s, size_t i, char32_t& cp) {
    auto byte = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const unsigned char lead = byte(0);
    size_t n;
    char32_t min;
    if (lead < 0x80) {
        cp = lead;
        return 1;
    } else if ((lead & 0xE0) == 0xC0) {
        n = 2, cp = lead & 0x1F, min = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
        n = 3, cp = lead & 0x0F, min = 0x800;
    } else if ((lead & 0xF8) == 0xF0) {
        n = 4, cp = lead & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (i + n > s.size()) return 0;
    for (size_t k = 1; k < n; ++k) {
        if ((byte(k) & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (byte(k) & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

void append_escaped(std::string& out, std::string_view s, EscapeStyle style) {
    const bool json = style == EscapeStyle::json;
    out.reserve(out.size() + s.size());
    size_t i = 0;
    while (i < s.size()) {
        size_t plain = i;  // printable ASCII goes through in runs
        while (plain < s.size() && printable_ascii(s[plain]) &&
               !(json && (s[plain] == '"' || s[plain] == '\\')))
            ++plain;
        out.append(s.data() + i, plain - i);
        i = plain;
        if (i == s.size()) break;
        char32_t cp = 0;
        const size_t n = utf8_sequence(s, i, cp);
        if (n == 0) {  // not UTF-8
            if (json)
                out += "\xEF\xBF\xBD";
            else
                append_hex(out, "\\x", static_cast<unsigned char>(s[i]), 2);
            i += 1;
            continue;
        }
        if (const char* named = named_escape(cp, style))
            out += named;
        else if (cp < 0x20 || cp == 0x7f)
            append_hex(out, json ? "\\u" : "\\x", cp, json ? 4 : 2);
        else if ((cp >= 0x80 && cp <= 0x9f) || format_character(cp))
            append_hex(out, "\\u", cp, 4);
        else
            out.append(s.data() + i, n);
        i += n;
    }
}

std::string escape_control(std::string_view s) {
    std::string out;
    append_escaped(out, s, EscapeStyle::text);
    return out;
}

size_t display_width(std::string_view s) {
    const locale_t locale = utf8_locale();
    const locale_t previous = locale ? uselocale(locale) : locale_t(0);
    size_t width = 0;
    for (size_t i = 0; i < s.size();) {
        char32_t cp = 0;
        const size_t n = utf8_sequence(s, i, cp);
        if (n <= 1) {  // ASCII, or a byte that is not UTF-8
            width += 1;
            i += 1;
            continue;
        }
        const int w = locale ? ::wcwidth(static_cast<wchar_t>(cp)) : 1;
        width += w < 0 ? 1 : static_cast<size_t>(w);
        i += n;
    }
    if (locale) uselocale(previous);
    return width;
}

}  // namespace kiqd
