#pragma once
// KiqdFleet: several kiqd processes started with one config, as a deployment runs them, and
// stopped together (SIGTERM to all, then each reaped) so that their shutdowns overlap.
#include <memory>
#include <string>
#include <vector>

#include "support/kiqd_process.hpp"

namespace kiqd::test {

class KiqdFleet {
  public:
    KiqdFleet(const std::string& binary, const std::string& yaml, int size);

    // SIGTERM to every process, then waits for each; returns the exit statuses in start order.
    std::vector<int> stop();
    // Waits until every process's output contains `text`.
    bool wait_for_output(const std::string& text, std::chrono::milliseconds timeout) const;

  private:
    std::vector<std::unique_ptr<KiqdProcess>> processes_;
};

}  // namespace kiqd::test
