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
    // Microseconds, as Ruby's Time#to_f carries, in Ruby's own float text ("1795695077.69526",
    // never "1795695077.695260").
    return ruby_float_text(std::round(epoch_secs * 1e6) / 1e6);
}

std::string payload_seconds_text(double epoch_secs) {
    // Ruby has two JSON writers for a float: Float#to_s (the json gem before 2.10, Ruby 3.1's
    // default 2.6) writes the shortest digits; the gem's own writer since 2.10 (Sidekiq 8 apps'
    // bundles) writes Grisu2's, one digit longer for about 1 microsecond timestamp in 840. A
    // timestamp whose two texts differ is moved by a microsecond or two, to one that both
    // write alike: a payload kiqd wrote then comes back byte for byte from either.
    const double micros = std::round(epoch_secs * 1e6);
    for (const double step : {0.0, 1.0, -1.0, 2.0, -2.0, 3.0, -3.0}) {
        const double v = (micros + step) / 1e6;
        std::string text = ruby_float_text(v);
        if (text == json_gem_float_text(v)) return text;
    }
    return ruby_float_text(micros / 1e6);
}

std::string payload_timestamp(Compat compat, double epoch_secs) {
    if (compat == Compat::v8)
        return fmt::format("{}", static_cast<long long>(std::llround(epoch_secs * 1000.0)));
    return payload_seconds_text(epoch_secs);
}

double timestamp_seconds(double value, bool is_integer) {
    // 1e11 s is the year 5138: any integer above it is a millisecond timestamp.
    if (is_integer && value > 1e11) return value / 1000.0;
    return value;
}

}  // namespace kiqd
