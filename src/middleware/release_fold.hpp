#pragma once
// ReleaseFold: turns the lock and slot releases that wait for the next batched refill (one
// EVALSHA each: the unique-jobs EXEC lock release of LockKeeper, the concurrency limit's slot
// release) into ONE script call that does all of them in order. Each release was a
// script call of its own, so a job still cost Redis one script invocation (~8-12 µs of its CPU)
// although it no longer cost a round trip; folded, a refill of 50 jobs costs one.
//
// The folded script runs exactly the Lua of the two release scripts (release_lock(), shared
// with LockKeeper's script; release() of concurrency_scripts.cpp), each inside a pcall (the slots
// of one scope freed together: one ZREM, one resume), so a failing release (a key of another type)
// stops none of the others: as separate commands whose replies nobody reads, they behaved the same.
// Commands it does not recognise (other scripts, other shapes, an EVAL whose source differs) are
// left where they are, in order after the folded call.
//
// Immutable after construction apart from the Scripts' learnt SHA1s (their own mutex): any
// thread; the refilling thread calls fold().
#include <vector>

#include "kiqd/redis/connection.hpp"
#include "kiqd/redis/script.hpp"

namespace kiqd {

class ReleaseFold {
  public:
    ReleaseFold();
    // Replaces the releases among `commands` by one script call placed first (the releases
    // then run before anything else of the write, as they ran before the rest of the refill).
    // Fewer than two releases: unchanged. May load the scripts on `conn` (SCRIPT LOAD, once);
    // when that fails, `commands` is unchanged and nothing throws.
    void fold(redis::Connection& conn, std::vector<redis::Command>& commands) const;

  private:
    bool loaded(redis::Connection& conn) const;
    redis::Script lock_release_;
    redis::Script slot_release_;
    redis::Script folded_;
};

}  // namespace kiqd
