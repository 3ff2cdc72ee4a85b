#pragma once
// ruby_json: a JSON text as Ruby's JSON.generate(JSON.parse(text)) writes it. sidekiq-unique-jobs
// digests `JSON.generate` of the job's identity (LockDigest); for payloads that carry no
// `lock_digest` (pushed by producers other than the gem), kiqd computes the same digest, so it
// must write the identity byte for byte as Ruby does:
//   * integers keep every digit (Ruby's are arbitrary precision: 2**64 stays 18446744073709551616;
//     a C++ double would round it), and -0 is 0;
//   * floats as Ruby's Float#to_s: the shortest round-trip digits, fixed notation for
//     1e-4 <= |x| < 1e15 with at least one decimal ("100.0", "0.0001"), otherwise "1.0e+20",
//     "1.0e-07" (at least two exponent digits); or as a json gem of 2.15 or later writes them
//     (JsonFloats, ruby_float.hpp);
//   * strings unescaped and escaped again the way the json gem does (\" \\ \b \f \n \r \t, other
//     controls as \u00XX, everything else raw UTF-8, "/" unescaped);
//   * objects keep their key order (Ruby hashes do), no whitespace anywhere.
// Pure functions; any thread.
#include <string>
#include <string_view>

#include "common/ruby_float.hpp"  // ruby_float_text: the floats inside

namespace kiqd {

// How the producer's json gem writes floats: as Float#to_s (json before 2.11, Ruby's default
// gems up to 3.4) or with its own generator (json 2.15 and later, 3.x). Between 2.11 and 2.14 the
// json gem used earlier variants of the latter, which neither matches for every float.
enum class JsonFloats { float_to_s, json_2_15 };

// Throws std::invalid_argument for text that is not one JSON value, nested deeper than 256, or a
// number Ruby's generator refuses (one that overflows to Infinity).
std::string ruby_json(std::string_view json_text, JsonFloats floats = JsonFloats::float_to_s);

// A UTF-8 string as a Ruby JSON string literal (quotes included).
std::string ruby_json_string(std::string_view utf8);

}  // namespace kiqd
