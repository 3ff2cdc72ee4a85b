#include "kiqd/clock.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>

#include "common/ruby_float.hpp"

namespace kiqd {

double epoch_seconds() {
    using namespace std::chrono;
    return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string score_text(double epoch_secs) {
    // Microseconds, as Ruby's Time#to_f carries, in Ruby's own float text: a Ruby client that
    // parses a payload kiqd wrote and generates it again must get the same bytes
    // ("1795695077.69526", never "1795695077.695260"), or Sidekiq's SortedEntry#reschedule, which
    // finds its entry by those bytes, adds a copy instead of moving it.
    return ruby_float_text(std::round(epoch_secs * 1e6) / 1e6);
}

std::string payload_timestamp(Compat compat, double epoch_secs) {
    if (compat == Compat::v8)
        return fmt::format("{}", static_cast<long long>(std::llround(epoch_secs * 1000.0)));
    return score_text(epoch_secs);
}

double timestamp_seconds(double value, bool is_integer) {
    // 1e11 s is the year 5138: any integer above it is a millisecond timestamp.
    if (is_integer && value > 1e11) return value / 1000.0;
    return value;
}

}  // namespace kiqd
