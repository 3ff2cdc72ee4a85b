#include "fetch/refill_acquirer.hpp"

namespace kiqd {

Acquired* AcquiredSet::claim(Acquired::Kind kind, const std::string& key) {
    for (auto& a : items)  // one or two items: a scan
        if (!a.claimed && a.kind == kind && a.key == key) {
            a.claimed = true;
            return &a;
        }
    return nullptr;
}

const Acquired* AcquiredSet::find(Acquired::Kind kind) const {
    for (const auto& a : items)
        if (!a.claimed && a.kind == kind) return &a;
    return nullptr;
}

}  // namespace kiqd
