#pragma once
// wait_until: how tests await what another thread or process does — poll a condition until it
// holds or a deadline passes, never sleep a guessed time. Called from the test's own thread.
//
// A deadline only bounds how long a test waits for something that should happen; it is never
// the thing asserted. Sanitizer builds run kiqd several times slower, and CI runs them beside
// its other steps on two cores, so KIQD_TEST_DEADLINE_SCALE (a number >= 1, set by
// scripts/test-sanitizers) stretches every deadline by that factor.
#include <chrono>
#include <functional>

namespace kiqd::test {

// Polls `pred` every 10 ms until it is true or `timeout` (times the deadline scale) passes;
// returns its last value.
bool wait_until(const std::function<bool()>& pred,
                std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace kiqd::test
