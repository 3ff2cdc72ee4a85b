#include "support/staged_units.hpp"

#include <unistd.h>

#include <regex>
#include <stdexcept>

#include "support/kiqd_process.hpp"

namespace kiqd::test {

bool StagedUnits::analyze_available() {
    return ::access(kAnalyze, X_OK) == 0;
}

StagedUnits::StagedUnits(const std::string& source_dir, const std::string& binary) {
    for (const std::string unit : {"kiqd.service", "kiqd@.service"}) {
        const std::string text = read_file(source_dir + "/systemd/" + unit);
        if (text.empty()) throw std::runtime_error("cannot read systemd/" + unit);
        dir_.write(unit, std::regex_replace(text, std::regex("/usr/bin/kiqd"), binary));
    }
}

std::pair<int, std::string> StagedUnits::analyze(const std::string& args) const {
    return run_command(
        {"/bin/sh", "-c", "cd '" + dir_.path() + "' && exec " + kAnalyze + " " + args});
}

}  // namespace kiqd::test
