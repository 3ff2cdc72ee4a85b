#include "support/wait_until.hpp"

#include <cstdlib>
#include <thread>

namespace kiqd::test {
namespace {

// KIQD_TEST_DEADLINE_SCALE, or 1 when it is unset or not a number >= 1.
double deadline_scale() {
    static const double scale = [] {
        const char* text = std::getenv("KIQD_TEST_DEADLINE_SCALE");
        if (text == nullptr) return 1.0;
        char* end = nullptr;
        const double value = std::strtod(text, &end);
        return end != text && *end == '\0' && value >= 1.0 ? value : 1.0;
    }();
    return scale;
}

}  // namespace

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
    const auto deadline =
        std::chrono::steady_clock::now() +
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout * deadline_scale());
    while (std::chrono::steady_clock::now() < deadline) {
        if (pred()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return pred();
}

}  // namespace kiqd::test
