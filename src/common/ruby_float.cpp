#include "common/ruby_float.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

namespace kiqd {

std::string ruby_float_text(double v) {
    if (!std::isfinite(v)) throw std::invalid_argument("not JSON Ruby can write: Infinity or NaN");
    if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
    // The shortest digits that read back as v, in scientific form: "-1.2345e+20".
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
    const std::string_view sci(buf, static_cast<size_t>(r.ptr - buf));
    const bool negative = sci.front() == '-';
    const size_t e_at = sci.find('e');
    std::string digits;
    for (char c : sci.substr(negative ? 1 : 0, e_at - (negative ? 1 : 0)))
        if (c != '.') digits += c;
    const int exp10 = std::atoi(std::string(sci.substr(e_at + 1)).c_str());
    const int decpt = exp10 + 1;  // digits before the decimal point
    const int n = static_cast<int>(digits.size());
    std::string out = negative ? "-" : "";
    if (decpt >= -3 && decpt <= 15) {
        if (decpt <= 0) {
            out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
        } else if (decpt >= n) {
            out += digits + std::string(static_cast<size_t>(decpt - n), '0') + ".0";
        } else {
            out += digits.substr(0, static_cast<size_t>(decpt)) + "." +
                   digits.substr(static_cast<size_t>(decpt));
        }
        return out;
    }
    out += digits.substr(0, 1) + "." + (n > 1 ? digits.substr(1) : "0") + "e";
    out += exp10 < 0 ? '-' : '+';
    const int a = std::abs(exp10);
    if (a < 10) out += '0';
    out += std::to_string(a);
    return out;
}

std::string json_gem_float_text(double v) {
    if (!std::isfinite(v)) throw std::invalid_argument("not JSON Ruby can write: Infinity or NaN");
    if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
    const std::string_view sci(buf, static_cast<size_t>(r.ptr - buf));
    const bool negative = sci.front() == '-';
    const size_t e_at = sci.find('e');
    std::string digits;
    for (char c : sci.substr(negative ? 1 : 0, e_at - (negative ? 1 : 0)))
        if (c != '.') digits += c;
    const int n = static_cast<int>(digits.size());
    // The json gem's fpconv: v = digits x 10^k; `exp` is the leading digit's power of ten.
    const int k = std::atoi(std::string(sci.substr(e_at + 1)).c_str()) - (n - 1);
    const int exp = std::abs(k + n - 1);
    std::string out = negative ? "-" : "";
    if (k >= 0 && exp < 15) return out + digits + std::string(static_cast<size_t>(k), '0') + ".0";
    if (k < 0 && (k > -7 || exp < 10)) {
        const int offset = n + k;  // digits before the decimal point
        if (offset <= 0)
            return out + "0." + std::string(static_cast<size_t>(-offset), '0') + digits;
        return out + digits.substr(0, static_cast<size_t>(offset)) + "." +
               digits.substr(static_cast<size_t>(offset));
    }
    out += digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    out += k + n - 1 < 0 ? "e-" : "e+";
    return out + std::to_string(exp);
}

}  // namespace kiqd
