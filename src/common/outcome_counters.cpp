#include "common/outcome_counters.hpp"

namespace kiqd {

OutcomeCounters& outcome_counters() noexcept {
    static OutcomeCounters counters;
    return counters;
}

}  // namespace kiqd
