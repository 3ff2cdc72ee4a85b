#pragma once
// KiqdProcess: runs a kiqd binary as a real child process with a generated YAML config, its
// stdout+stderr captured to a file; signals and stops it by PID. wait_exit() reaps it.
#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace kiqd::test {

class KiqdProcess {
  public:
    // `yaml` is written to a temporary config file passed with -C (empty: no -C).
    KiqdProcess(const std::string& binary, const std::string& yaml,
                std::vector<std::string> extra_args = {},
                std::map<std::string, std::string> env = {});
    ~KiqdProcess();  // SIGKILLs the process if it is still running

    pid_t pid() const { return pid_; }
    void signal(int signo) const;
    // Waits for exit; returns the exit status (128+signal when killed), or -1 on timeout.
    int wait_exit(std::chrono::milliseconds timeout = std::chrono::seconds(30));
    bool running();
    std::string output() const;  // everything the process printed so far
    const std::string& config_path() const { return config_path_; }

  private:
    pid_t pid_ = -1;
    std::string dir_;
    std::string config_path_;
    std::string log_path_;
    int status_ = -1;
};

// Runs a command to completion; returns {exit status, stdout+stderr}.
std::pair<int, std::string> run_command(const std::vector<std::string>& argv,
                                        std::map<std::string, std::string> env = {});

}  // namespace kiqd::test
