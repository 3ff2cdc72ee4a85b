#include "common/ruby_float.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>

namespace kiqd {

namespace {

// The shortest digits that read back as v (finite, not zero), without sign or point, and the
// power of ten of the first one: 1.2345e+20 is {"12345", 20}.
struct Shortest {
    bool negative;
    std::string digits;
    int exp10;
};

Shortest shortest(double v) {
    if (!std::isfinite(v)) throw std::invalid_argument("not JSON Ruby can write: Infinity or NaN");
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
    const std::string_view sci(buf, static_cast<size_t>(r.ptr - buf));
    Shortest s{sci.front() == '-', "", 0};
    const size_t e_at = sci.find('e');
    for (char c : sci.substr(s.negative ? 1 : 0, e_at - (s.negative ? 1 : 0)))
        if (c != '.') s.digits += c;
    s.exp10 = std::atoi(std::string(sci.substr(e_at + 1)).c_str());
    return s;
}

// The digits the json gem's own writer (2.10 and later: fpconv, a Grisu2) produces for v, and
// the power of ten of the first. Grisu2 reads back as v but is not always the shortest: for
// about 1 double in 700 it has a digit more (1814033939.7751229 where Float#to_s writes
// 1814033939.775123). nlohmann's dump is a Grisu2 too and gives the same digits: 799,841
// doubles compared with json 3.1.0's JSON.generate (500,000 microsecond timestamps, 300,000
// random bit patterns), no difference.
Shortest grisu2(double v) {
    if (!std::isfinite(v)) throw std::invalid_argument("not JSON Ruby can write: Infinity or NaN");
    const std::string text = nlohmann::json(v).dump();
    Shortest s{text.front() == '-', "", 0};
    const size_t e_at = text.find_first_of("eE");
    const std::string_view mantissa =
        std::string_view(text).substr(s.negative ? 1 : 0, e_at - (s.negative ? 1 : 0));
    const int exponent = e_at == std::string::npos ? 0 : std::atoi(text.c_str() + e_at + 1);
    const size_t point = std::min(mantissa.find('.'), mantissa.size());
    int first = -1;  // index in `mantissa` of the first digit that is not 0
    for (size_t i = 0; i < mantissa.size(); ++i) {
        if (mantissa[i] == '.') continue;
        if (first < 0 && mantissa[i] == '0') continue;
        if (first < 0) first = static_cast<int>(i);
        s.digits += mantissa[i];
    }
    while (s.digits.size() > 1 && s.digits.back() == '0') s.digits.pop_back();
    // The first digit's power of ten: how far it stands left (or right) of the point.
    const int p = static_cast<int>(point);
    s.exp10 = exponent + (first < p ? p - first - 1 : p - first);
    return s;
}

}  // namespace

std::string ruby_float_text(double v) {
    if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
    const auto [negative, digits, exp10] = shortest(v);
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
    if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
    const auto [negative, digits, exp10] = grisu2(v);
    const int n = static_cast<int>(digits.size());
    // The json gem's fpconv: v = digits x 10^k; `exp` is the leading digit's power of ten.
    const int k = exp10 - (n - 1);
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
