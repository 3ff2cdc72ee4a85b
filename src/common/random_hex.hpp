#pragma once
// random_hex: a short random token of lowercase hex digits, for the parts of Redis members and
// lock values that only need to differ between takers (a lock owner's token, a concurrency
// slot's, a lock's wait token). Not for secrets: a per-thread mt19937_64 seeded from
// std::random_device. Any thread.
#include <cstddef>
#include <string>

namespace kiqd {

// `digits` hex digits (at most 16: one 64-bit draw).
std::string random_hex(size_t digits);

}  // namespace kiqd
