#include "support/kiqd_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace kiqd::test {
namespace {

pid_t spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
            const std::string& log_path) {
    pid_t pid = ::fork();
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

std::string make_temp_dir() {
    char tmpl[] = "/tmp/kiqd-test-XXXXXX";
    return ::mkdtemp(tmpl);
}

int decode(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
}

}  // namespace

KiqdProcess::KiqdProcess(const std::string& binary, const std::string& yaml,
                         std::vector<std::string> extra_args,
                         std::map<std::string, std::string> env)
    : dir_(make_temp_dir()) {
    log_path_ = dir_ + "/output.log";
    std::vector<std::string> argv{binary};
    if (!yaml.empty()) {
        config_path_ = dir_ + "/kiqd.yml";
        std::ofstream(config_path_) << yaml;
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
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
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
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (running()) {
        if (std::chrono::steady_clock::now() > deadline) return -1;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return status_;
}

std::string KiqdProcess::output() const {
    std::ifstream in(log_path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

std::pair<int, std::string> run_command(const std::vector<std::string>& argv,
                                        std::map<std::string, std::string> env) {
    const std::string dir = make_temp_dir();
    const std::string log = dir + "/out.log";
    pid_t pid = spawn(argv, env, log);
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::ifstream in(log);
    std::stringstream s;
    s << in.rdbuf();
    std::filesystem::remove_all(dir);
    return {decode(status), s.str()};
}

}  // namespace kiqd::test
