#pragma once
// Wall-clock timestamps in the units each Sidekiq major version expects
// (docs/data-model.md#timestamps-and-units): 6.x/7.x payload fields are float epoch seconds *always
// written with a decimal point*, 8.x payload fields are integer epoch milliseconds; ZSET scores are
// float seconds in every version. Stateless; safe from any thread.
#include <string>

namespace kiqd {

enum class Compat { v6 = 6, v7 = 7, v8 = 8 };

double epoch_seconds();  // now, from the system clock

// A payload timestamp ("created_at", "enqueued_at", "failed_at", ...) as JSON number text.
std::string payload_timestamp(Compat compat, double epoch_secs);
inline std::string payload_timestamp(Compat compat) {
    return payload_timestamp(compat, epoch_seconds());
}

// Float epoch seconds to the microsecond, as Ruby's Float#to_s writes them ("1795316341.33688",
// "1700000000.0"): ZSET scores. Always has a decimal point.
std::string score_text(double epoch_secs);
// The same for a 6.x/7.x payload timestamp, within a few microseconds of `epoch_secs`: a value
// that Float#to_s and the json gem's own float writer (2.10 and later) write alike, so that a
// Ruby client that parses the payload and generates it again gets kiqd's bytes back whatever its
// json gem (Sidekiq's SortedEntry#reschedule finds its entry by those bytes).
std::string payload_seconds_text(double epoch_secs);

// Reads a payload timestamp back in seconds: a JSON float is seconds, a JSON integer is
// milliseconds when it is too large to be seconds (Sidekiq 8 reads integers as ms).
double timestamp_seconds(double value, bool is_integer);

}  // namespace kiqd
