#include "support/test_child.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

namespace kiqd::test {

pid_t fork_test_child() {
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (::getppid() != parent) ::_exit(127);  // the test binary was gone before prctl
    }
    return pid;
}

}  // namespace kiqd::test
