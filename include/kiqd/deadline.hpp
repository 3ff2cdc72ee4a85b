#pragma once
// Saturating time arithmetic: `now + duration` and duration conversions that stop at the
// clock's limits instead of overflowing. A steady_clock time point counts nanoseconds in 64 bits
// (~292 years): a timeout of 9999999999 s added to now wrapped into the past, so an exec job
// "timed out" after 20 ms and a shutdown that should have waited requeued its jobs at once.
// Config durations are bounded at load (366 days), and every deadline is still computed here,
// because some durations are products (a poll interval times the process count) or come from a
// job's arguments. Header-only and stateless: any thread; public so that plugins' handlers (and
// StopSignal::wait_for) get the same guarantee.
#include <chrono>
#include <cmath>

namespace kiqd {

// `d` in the units of `To`, or To's largest (smallest) value when it does not fit; NaN is zero.
// Works for floating durations (a job's "sleep 1e300 seconds") as well as integer ones.
template <class To, class Rep, class Period>
To saturating_cast(std::chrono::duration<Rep, Period> d) {
    const double units = std::chrono::duration<double, typename To::period>(d).count();
    if (std::isnan(units)) return To::zero();
    // A millionth short of the limit: a double near 2^63 cannot say which side of it it is.
    if (units >= static_cast<double>(To::max().count()) * 0.999999) return To::max();
    if (units <= static_cast<double>(To::min().count()) * 0.999999) return To::min();
    return std::chrono::duration_cast<To>(d);
}

// now + d, or the clock's last (first) time point when the sum does not fit.
template <class Clock, class Dur, class Rep, class Period>
std::chrono::time_point<Clock, Dur> saturating_deadline(std::chrono::time_point<Clock, Dur> now,
                                                        std::chrono::duration<Rep, Period> d) {
    using TimePoint = std::chrono::time_point<Clock, Dur>;
    const Dur step = saturating_cast<Dur>(d);
    // Compared on the side that cannot overflow: max - step for a positive step, min - step
    // for a negative one.
    const Dur since_epoch = now.time_since_epoch();
    if (step > Dur::zero() && since_epoch >= Dur::max() - step) return TimePoint::max();
    if (step < Dur::zero() && since_epoch <= Dur::min() - step) return TimePoint::min();
    return now + step;
}

// steady_clock::now() + d, saturated: the deadline of a wait `d` from now.
template <class Rep, class Period>
std::chrono::steady_clock::time_point deadline_in(std::chrono::duration<Rep, Period> d) {
    return saturating_deadline(std::chrono::steady_clock::now(), d);
}

}  // namespace kiqd
