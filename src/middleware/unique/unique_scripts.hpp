#pragma once
// The Lua scripts of the unique-jobs middleware (unique_jobs.hpp), with what each reads, writes and
// answers documented beside its text in unique_scripts.cpp: the run lock's acquire (kiqd's own
// <digest>:WAIT and <digest>:EXEC), the same with the gem's client lock released in the same
// call, the gem's client lock released or taken on its own, a copy scheduled holding the client
// lock, and a wait lock given up. Text only: loaded by the middleware's redis::Script members.

namespace kiqd::unique_scripts {

extern const char* const kAcquire;
extern const char* const kAcquireReleasingClientLock;
extern const char* const kClientUnlock;
extern const char* const kClientLock;
extern const char* const kScheduleHolding;
extern const char* const kDropWait;

}  // namespace kiqd::unique_scripts
