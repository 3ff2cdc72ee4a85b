#include "middleware/unique/ruby_json.hpp"

#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "job/raw_json_object.hpp"

namespace kiqd {
namespace {

constexpr int kMaxDepth = 256;

[[noreturn]] void bad(const char* what) {
    throw std::invalid_argument(std::string("not JSON Ruby can write: ") + what);
}

// Reads one JSON value from `in` at `pos` and appends Ruby's text of it to `out`.
class Rewriter {
  public:
    Rewriter(std::string_view in, JsonFloats floats) : in_(in), floats_(floats) {}

    std::string run() {
        std::string out;
        skip_space();
        value(out, 0);
        skip_space();
        if (pos_ != in_.size()) bad("text after the value");
        return out;
    }

  private:
    void skip_space() {
        while (pos_ < in_.size() &&
               (in_[pos_] == ' ' || in_[pos_] == '\t' || in_[pos_] == '\n' || in_[pos_] == '\r'))
            ++pos_;
    }
    char peek() const { return pos_ < in_.size() ? in_[pos_] : '\0'; }
    void expect(char c) {
        if (peek() != c) bad("unexpected character");
        ++pos_;
    }
    void literal(std::string_view word, std::string& out) {
        if (in_.substr(pos_, word.size()) != word) bad("unknown literal");
        pos_ += word.size();
        out += word;
    }

    void value(std::string& out, int depth) {
        if (depth > kMaxDepth) bad("nested too deep");
        switch (peek()) {
            case '{':
                return object(out, depth);
            case '[':
                return array(out, depth);
            case '"': {
                std::string s;
                string(s);
                out += ruby_json_string(s);
                return;
            }
            case 't':
                return literal("true", out);
            case 'f':
                return literal("false", out);
            case 'n':
                return literal("null", out);
            default:
                return number(out);
        }
    }

    // `{ member, ... }` or `[ value, ... ]`: the brackets and commas, with `element` writing each
    // member or value.
    template <class Element>
    void sequence(std::string& out, char open, char close, const Element& element) {
        expect(open);
        out += open;
        skip_space();
        if (peek() == close) {
            ++pos_;
            out += close;
            return;
        }
        for (bool first = true;; first = false) {
            if (!first) out += ',';
            skip_space();
            element();
            skip_space();
            if (peek() != ',') break;
            ++pos_;
        }
        expect(close);
        out += close;
    }

    void object(std::string& out, int depth) {
        sequence(out, '{', '}', [&] {
            std::string key;
            string(key);
            out += ruby_json_string(key);
            skip_space();
            expect(':');
            out += ':';
            skip_space();
            value(out, depth + 1);
        });
    }

    void array(std::string& out, int depth) {
        sequence(out, '[', ']', [&] { value(out, depth + 1); });
    }

    // The decoded bytes of a JSON string: the token is found here, decoded by json_unquote
    // (job/raw_json_object), which answers "" for what is not a valid string (a lone surrogate,
    // an unknown escape).
    void string(std::string& s) {
        const size_t start = pos_;
        expect('"');
        for (;;) {
            if (pos_ >= in_.size()) bad("unterminated string");
            const char c = in_[pos_++];
            if (c == '"') break;
            if (static_cast<unsigned char>(c) < 0x20) bad("control character in a string");
            if (c == '\\' && pos_++ >= in_.size()) bad("unterminated escape");
        }
        const std::string_view token = in_.substr(start, pos_ - start);
        s = json_unquote(token);
        if (s.empty() && token.size() > 2) bad("an invalid string escape");
    }

    void number(std::string& out) {
        const size_t start = pos_;
        if (peek() == '-') ++pos_;
        auto digits = [&] {
            const size_t from = pos_;
            while (pos_ < in_.size() && in_[pos_] >= '0' && in_[pos_] <= '9') ++pos_;
            if (pos_ == from) bad("a number without digits");
        };
        if (peek() == '0')
            ++pos_;
        else
            digits();
        bool is_float = false;
        if (peek() == '.') {
            ++pos_;
            digits();
            is_float = true;
        }
        if (peek() == 'e' || peek() == 'E') {
            ++pos_;
            if (peek() == '+' || peek() == '-') ++pos_;
            digits();
            is_float = true;
        }
        const std::string token(in_.substr(start, pos_ - start));
        if (!is_float) {
            out += token == "-0" ? "0" : token;  // an Integer: every digit kept
            return;
        }
        const double v = std::strtod(token.c_str(), nullptr);
        out += floats_ == JsonFloats::json_2_15 ? json_gem_float_text(v) : ruby_float_text(v);
    }

    std::string_view in_;
    JsonFloats floats_;
    size_t pos_ = 0;
};

}  // namespace

std::string ruby_json_string(std::string_view utf8) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    out.reserve(utf8.size() + 2);
    out += '"';
    for (const char c : utf8) {
        const auto u = static_cast<unsigned char>(c);
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            default:
                if (u < 0x20) {
                    out += "\\u00";
                    out += kHex[u >> 4];
                    out += kHex[u & 15];
                } else {
                    out += c;
                }
        }
    }
    out += '"';
    return out;
}

std::string ruby_json(std::string_view json_text, JsonFloats floats) {
    return Rewriter(json_text, floats).run();
}

}  // namespace kiqd
