#include "support/kiqd_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "support/test_child.hpp"
#include "support/wait_until.hpp"

namespace kiqd::test {
namespace {

pid_t spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
            const std::string& log_path) {
    pid_t pid = fork_test_child();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
        int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        ::setpgid(0, 0);  // Ctrl-C in the test's terminal must not reach the child
        for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
        std::vector<char*> args;
        for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        ::execv(args[0], args.data());
        ::_exit(127);
    }
    return pid;
}

int decode(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
}

}  // namespace

KiqdProcess::KiqdProcess(const std::string& binary, const std::string& yaml,
                         std::vector<std::string> extra_args,
                         std::map<std::string, std::string> env) {
    log_path_ = dir_.file("output.log");
    std::vector<std::string> argv{binary};
    if (!yaml.empty()) {
        config_path_ = dir_.write("kiqd.yml", yaml);
        argv.push_back("-C");
        argv.push_back(config_path_);
    }
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    pid_ = spawn(argv, env, log_path_);
}

KiqdProcess::~KiqdProcess() {
    if (running()) {
        ::kill(pid_, SIGKILL);
        wait_exit(std::chrono::seconds(5));
    }
}

void KiqdProcess::signal(int signo) const {
    ::kill(pid_, signo);
}

bool KiqdProcess::running() {
    if (status_ != -1) return false;
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
        status_ = decode(status);
        return false;
    }
    return true;
}

int KiqdProcess::wait_exit(std::chrono::milliseconds timeout) {
    return wait_until([&] { return !running(); }, timeout) ? status_ : -1;
}

int KiqdProcess::stop(std::chrono::milliseconds timeout) {
    signal(SIGTERM);
    return wait_exit(timeout);
}

std::string KiqdProcess::output() const {
    return read_file(log_path_);
}

bool KiqdProcess::wait_for_output(const std::string& text,
                                  std::chrono::milliseconds timeout) const {
    return wait_until([&] { return output().find(text) != std::string::npos; }, timeout);
}

std::string binary_under_test(const std::string& built) {
    const char* other = std::getenv("KIQD_BINARY_UNDER_TEST");
    return other && *other ? other : built;
}

std::pair<int, std::string> run_command(const std::vector<std::string>& argv,
                                        std::map<std::string, std::string> env) {
    const TempDir dir;
    const std::string log = dir.file("out.log");
    pid_t pid = spawn(argv, env, log);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return {decode(status), read_file(log)};
}

std::pair<int, std::string> check_config(const std::string& binary, const std::string& yaml,
                                         const std::vector<std::string>& extra_args) {
    const TempDir dir;
    std::vector<std::string> argv{binary, "check-config", "-C", dir.write("kiqd.yml", yaml)};
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    return run_command(argv);
}

size_t occurrences(const std::string& text, const std::string& needle) {
    size_t n = 0;
    for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
    return n;
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
}

}  // namespace kiqd::test
