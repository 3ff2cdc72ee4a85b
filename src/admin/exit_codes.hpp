#pragma once
// The exit codes of the admin commands and `kiqd enqueue` besides 0 (sysexits.h numbers where
// one fits). Errors themselves are one line on stderr. The admin CLI is single-threaded.

namespace kiqd::admin {

// Nothing matched (unknown identity, no such JID), bad usage of an action, or (enqueue) a
// client middleware stopped the push.
constexpr int kExitNotFound = 1;
// EX_USAGE: an enqueue argument the job cannot be built from (not JSON, an empty CLASS or
// --queue, a TIME that is not understood).
constexpr int kExitBadInput = 64;
// EX_UNAVAILABLE: Redis unreachable or failing.
constexpr int kExitUnavailable = 69;

}  // namespace kiqd::admin
