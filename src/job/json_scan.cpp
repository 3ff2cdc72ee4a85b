#include "job/json_scan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

namespace kiqd {
namespace {

// A recursive-descent checker over [p, end). Each function returns the position just past what
// it read, or nullptr when the text is not valid there.
class Scanner {
  public:
    Scanner(const char* end, JsonMemberVisitor* visitor, size_t depth_limit)
        : end_(end), visitor_(visitor), depth_limit_(depth_limit) {}
    size_t max_depth = 0;
    bool too_deep = false;

    // Records a level of nesting; false when it is one too many.
    bool enter(size_t depth) {
        max_depth = std::max(max_depth, depth);
        if (depth > depth_limit_) too_deep = true;
        return !too_deep;
    }

    const char* ws(const char* p) const {
        while (p < end_ && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) ++p;
        return p;
    }

    const char* value(const char* p, size_t depth) {
        if (p >= end_) return nullptr;
        switch (*p) {
            case '{':
                return object(p, depth + 1, nullptr);
            case '[':
                return array(p, depth + 1);
            case '"':
                return string(p);
            case 't':
                return literal(p, "true");
            case 'f':
                return literal(p, "false");
            case 'n':
                return literal(p, "null");
            default:
                return number(p);
        }
    }

    // `top`: set when this is the top-level object, whose members go to the visitor.
    const char* object(const char* p, size_t depth, bool* top) {
        if (!enter(depth)) return nullptr;
        if (top) *top = true;
        p = ws(p + 1);
        if (p < end_ && *p == '}') return p + 1;
        for (;;) {
            if (p >= end_ || *p != '"') return nullptr;
            const char* key = p;
            if (!(p = string(p))) return nullptr;
            const std::string_view key_token(key, static_cast<size_t>(p - key));
            p = ws(p);
            if (p >= end_ || *p != ':') return nullptr;
            const char* val = ws(p + 1);
            if (!(p = value(val, depth))) return nullptr;
            if (top && visitor_)
                visitor_->member(key_token, std::string_view(val, static_cast<size_t>(p - val)));
            p = ws(p);
            if (p >= end_) return nullptr;
            if (*p == '}') return p + 1;
            if (*p != ',') return nullptr;
            p = ws(p + 1);
        }
    }

    const char* array(const char* p, size_t depth) {
        if (!enter(depth)) return nullptr;
        p = ws(p + 1);
        if (p < end_ && *p == ']') return p + 1;
        for (;;) {
            if (!(p = value(p, depth))) return nullptr;
            p = ws(p);
            if (p >= end_) return nullptr;
            if (*p == ']') return p + 1;
            if (*p != ',') return nullptr;
            p = ws(p + 1);
        }
    }

    const char* string(const char* p) const {
        for (++p; p < end_;) {
            const auto c = static_cast<unsigned char>(*p);
            if (c == '"') return p + 1;
            if (c < 0x20) return nullptr;  // control characters must be escaped
            if (c == '\\') {
                if (!(p = escape(p + 1))) return nullptr;
            } else if (c < 0x80) {
                ++p;
            } else if (!(p = utf8(p))) {
                return nullptr;
            }
        }
        return nullptr;  // unterminated
    }

  private:
    // p is just past a backslash.
    const char* escape(const char* p) const {
        if (p >= end_) return nullptr;
        switch (*p) {
            case '"':
            case '\\':
            case '/':
            case 'b':
            case 'f':
            case 'n':
            case 'r':
            case 't':
                return p + 1;
            case 'u':
                break;
            default:
                return nullptr;
        }
        int unit = hex4(p + 1);
        if (unit < 0) return nullptr;
        p += 5;
        if (unit >= 0xDC00 && unit <= 0xDFFF) return nullptr;  // a low surrogate alone
        if (unit >= 0xD800 && unit <= 0xDBFF) {                // must be followed by a low one
            if (end_ - p < 6 || p[0] != '\\' || p[1] != 'u') return nullptr;
            const int low = hex4(p + 2);
            if (low < 0xDC00 || low > 0xDFFF) return nullptr;
            p += 6;
        }
        return p;
    }

    int hex4(const char* p) const {
        if (end_ - p < 4) return -1;
        int v = 0;
        for (int i = 0; i < 4; ++i) {
            const char c = p[i];
            int d;
            if (c >= '0' && c <= '9')
                d = c - '0';
            else if (c >= 'a' && c <= 'f')
                d = c - 'a' + 10;
            else if (c >= 'A' && c <= 'F')
                d = c - 'A' + 10;
            else
                return -1;
            v = v * 16 + d;
        }
        return v;
    }

    // One multi-byte UTF-8 sequence, with the ranges of RFC 3629 (no overlongs, no surrogates,
    // nothing above U+10FFFF).
    const char* utf8(const char* p) const {
        const auto b0 = static_cast<unsigned char>(p[0]);
        auto in = [&](ptrdiff_t i, unsigned lo, unsigned hi) {
            if (end_ - p <= i) return false;
            const auto b = static_cast<unsigned char>(p[i]);
            return b >= lo && b <= hi;
        };
        if (b0 >= 0xC2 && b0 <= 0xDF) return in(1, 0x80, 0xBF) ? p + 2 : nullptr;
        if (b0 >= 0xE0 && b0 <= 0xEF) {
            const unsigned lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
            return in(1, lo, hi) && in(2, 0x80, 0xBF) ? p + 3 : nullptr;
        }
        if (b0 >= 0xF0 && b0 <= 0xF4) {
            const unsigned lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
            return in(1, lo, hi) && in(2, 0x80, 0xBF) && in(3, 0x80, 0xBF) ? p + 4 : nullptr;
        }
        return nullptr;
    }

    const char* literal(const char* p, std::string_view word) const {
        if (static_cast<size_t>(end_ - p) < word.size() || std::string_view(p, word.size()) != word)
            return nullptr;
        return p + word.size();
    }

    // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, and finite as a double: nlohmann refuses
    // a number that overflows (1e999, or an integer of hundreds of digits).
    const char* number(const char* p) const {
        const char* start = p;
        bool exponent = false;
        auto digit = [&](const char* q) { return q < end_ && *q >= '0' && *q <= '9'; };
        if (p < end_ && *p == '-') ++p;
        if (!digit(p)) return nullptr;
        if (*p == '0')
            ++p;
        else
            while (digit(p)) ++p;
        if (p < end_ && *p == '.') {
            if (!digit(++p)) return nullptr;
            while (digit(p)) ++p;
        }
        if (p < end_ && (*p == 'e' || *p == 'E')) {
            exponent = true;
            ++p;
            if (p < end_ && (*p == '+' || *p == '-')) ++p;
            if (!digit(p)) return nullptr;
            while (digit(p)) ++p;
        }
        // Only these can overflow a double; they are rare in payloads, so a copy is fine.
        if (exponent || p - start > 300) {
            const std::string token(start, p);
            if (!std::isfinite(std::strtod(token.c_str(), nullptr))) return nullptr;
        }
        return p;
    }

    const char* end_;
    JsonMemberVisitor* visitor_;
    const size_t depth_limit_;
};

}  // namespace

JsonScanResult json_scan(std::string_view text, JsonMemberVisitor* visitor, size_t depth_limit) {
    JsonScanResult result;
    Scanner scanner(text.data() + text.size(), visitor, depth_limit);
    const char* p = scanner.ws(text.data());
    if (p < text.data() + text.size() && *p == '{')
        p = scanner.object(p, 1, &result.is_object);
    else
        p = scanner.value(p, 0);
    result.valid = p && scanner.ws(p) == text.data() + text.size();
    result.max_depth = scanner.max_depth;
    result.too_deep = scanner.too_deep;
    return result;
}

std::optional<std::string> nlohmann_leniency(std::string_view text) {
    // Only a whole mark at the very start is skipped: a partial one, or one after whitespace, is
    // an error to nlohmann too.
    if (text.starts_with("\xEF\xBB\xBF"))
        return std::string("unexpected byte-order mark (EF BB BF) at the start of the payload");
    if (const size_t at = text.find('\0'); at != std::string_view::npos)
        return "unexpected NUL byte at offset " + std::to_string(at) + " of the payload";
    return std::nullopt;
}

}  // namespace kiqd
