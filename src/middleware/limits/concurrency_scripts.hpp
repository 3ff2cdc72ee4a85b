#pragma once
// The Lua of the concurrency limit (concurrency_limit.hpp): acquire, run by the middleware
// before a job; release, after it; check, the SlotKeeper's (slot_keeper.hpp) periodic pass over
// every scope. All three start with one shared prelude: Redis's clock, and the resume step that
// moves parked jobs back to their queues while the scope has free slots. Below both the
// middleware and the keeper, so neither includes the other for them. Immutable; any thread.
#include <string>

namespace kiqd {

const std::string& concurrency_acquire_script();
const std::string& concurrency_release_script();
const std::string& concurrency_check_script();
// The shared prelude followed by `body`: a script of another component that calls release()
// (release_fold.hpp folds a refill's slot and lock releases into one script call).
std::string concurrency_script_with(const char* body);
// A new slot's member in the slots ZSET: "<identity>|<jid>|<12 hex digits>", unique per
// acquire, and telling which process holds it to anyone reading the ZSET (the per-job acquire
// and a batched refill's take the same shape). Any thread.
std::string concurrency_slot_member(const std::string& identity, const std::string& jid);

}  // namespace kiqd
