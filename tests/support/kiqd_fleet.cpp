#include "support/kiqd_fleet.hpp"

#include <signal.h>

#include "support/wait_until.hpp"

namespace kiqd::test {

KiqdFleet::KiqdFleet(const std::string& binary, const std::string& yaml, int size) {
    for (int i = 0; i < size; ++i)
        processes_.push_back(std::make_unique<KiqdProcess>(binary, yaml));
}

std::vector<int> KiqdFleet::stop() {
    for (auto& p : processes_) p->signal(SIGTERM);
    std::vector<int> statuses;
    for (auto& p : processes_) statuses.push_back(p->wait_exit());
    return statuses;
}

bool KiqdFleet::wait_for_output(const std::string& text, std::chrono::milliseconds timeout) const {
    return wait_until(
        [&] {
            for (const auto& p : processes_)
                if (p->output().find(text) == std::string::npos) return false;
            return true;
        },
        timeout);
}

}  // namespace kiqd::test
