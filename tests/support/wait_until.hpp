#pragma once
// wait_until: how tests await what another thread or process does — poll a condition until it
// holds or a deadline passes, never sleep a guessed time. Called from the test's own thread.
#include <chrono>
#include <functional>

namespace kiqd::test {

// Polls `pred` every 10 ms until it is true or `timeout` passes; returns its last value.
bool wait_until(const std::function<bool()>& pred,
                std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace kiqd::test
