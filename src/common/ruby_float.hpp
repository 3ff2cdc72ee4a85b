#pragma once
// ruby_float: a double as Ruby's Float#to_s writes it, which is what Ruby's JSON.generate writes
// for a float: the shortest digits that read back as the same double, fixed notation for
// 1e-4 <= |x| < 1e15 with at least one decimal ("100.0", "0.0001"), otherwise "1.0e+20",
// "1.0e-07" (at least two exponent digits). kiqd writes payload timestamps this way so that a
// Ruby client that parses a payload and generates it again gets kiqd's bytes back (Sidekiq's
// SortedEntry#reschedule finds its entry by those bytes). Pure function; any thread.
#include <string>

namespace kiqd {

// Throws std::invalid_argument for Infinity and NaN, as JSON.generate does.
std::string ruby_float_text(double v);

// A double as the json gem's own generator writes it since 2.15 (3.x too), instead of
// Float#to_s: fixed notation up to 15 integer digits ("100.0", "123456789012345.0") and down to
// 1e-7 or, for short mantissas, further ("0.0000001", "0.000025"); otherwise scientific without
// a ".0" or exponent padding ("1e+20", "1.5e-10", "5e-324"). Its digits are Grisu2's (the
// gem's fpconv, since 2.10), not always the shortest: 1814033939.7751229 where Float#to_s writes
// 1814033939.775123. An app's JSON.generate writes this when its bundle has such a json gem.
// Throws as ruby_float_text.
std::string json_gem_float_text(double v);

}  // namespace kiqd
