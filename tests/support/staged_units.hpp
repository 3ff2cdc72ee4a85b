#pragma once
// StagedUnits: the shipped systemd units (systemd/kiqd.service, kiqd@.service) copied into a
// private directory with ExecStart pointed at the binary under test (systemd-analyze verify
// checks that it exists), and systemd-analyze run in that directory, where verify resolves
// kiqd@1.service from the template and finds drop-ins. One test thread owns it.
#include <string>
#include <utility>

#include "support/temp_dir.hpp"

namespace kiqd::test {

class StagedUnits {
  public:
    static constexpr const char* kAnalyze = "/usr/bin/systemd-analyze";
    static bool analyze_available();  // false: the caller skips with a WARN

    // Throws std::runtime_error when a unit cannot be read from `source_dir`/systemd/.
    StagedUnits(const std::string& source_dir, const std::string& binary);
    const TempDir& dir() const { return dir_; }
    // `systemd-analyze <args>` in the units' directory (a shell sets it for the child only, so
    // the test's own working directory never changes): {exit status, output}.
    std::pair<int, std::string> analyze(const std::string& args) const;

  private:
    TempDir dir_{"kiqd-units"};
};

}  // namespace kiqd::test
