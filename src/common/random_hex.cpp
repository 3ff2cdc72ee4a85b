#include "common/random_hex.hpp"

#include <algorithm>
#include <random>

namespace kiqd {

std::string random_hex(size_t digits) {
    thread_local std::mt19937_64 rng(std::random_device{}());
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out(std::min<size_t>(digits, 16), '0');
    auto v = rng();
    for (auto& c : out) {
        c = kHex[v & 15];
        v >>= 4;
    }
    return out;
}

}  // namespace kiqd
