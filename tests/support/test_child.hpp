#pragma once
// fork_test_child: fork(2) for a process a test starts (kiqd, redis-server, a sentinel). The
// child is tied to the test binary: if the test binary is killed (CI stopping a failed run), no
// destructor stops the child, so the kernel sends it SIGTERM instead. Called from the test's own
// thread, which must outlive the child (PR_SET_PDEATHSIG follows the forking thread).
#include <sys/types.h>

namespace kiqd::test {

// As fork(2): the child's pid in the parent, 0 in the child, -1 on failure.
pid_t fork_test_child();

}  // namespace kiqd::test
