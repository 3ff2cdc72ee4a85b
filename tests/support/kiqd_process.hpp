#pragma once
// KiqdProcess: runs a kiqd binary as a real child process with a generated YAML config, its
// stdout+stderr captured to a file; signals and stops it by PID. wait_exit() reaps it.
#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "support/temp_dir.hpp"

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
    // A clean stop: SIGTERM, then wait_exit().
    int stop(std::chrono::milliseconds timeout = std::chrono::seconds(30));
    bool running();
    std::string output() const;  // everything the process printed so far
    // Waits until the output contains `text`.
    bool wait_for_output(const std::string& text,
                         std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;
    const std::string& config_path() const { return config_path_; }

  private:
    pid_t pid_ = -1;
    TempDir dir_;
    std::string config_path_;
    std::string log_path_;
    int status_ = -1;
};

// `built` (the binary built with the tests), unless the environment variable
// KIQD_BINARY_UNDER_TEST names another: runs a test against another build, such as the code
// before a fix.
std::string binary_under_test(const std::string& built);

// Runs a command to completion; returns {exit status, stdout+stderr}.
std::pair<int, std::string> run_command(const std::vector<std::string>& argv,
                                        std::map<std::string, std::string> env = {});

// `binary check-config -C <yaml in a temporary file> extra_args...`; returns {status, output}.
std::pair<int, std::string> check_config(const std::string& binary, const std::string& yaml,
                                         const std::vector<std::string>& extra_args = {});

// How many times `needle` occurs in `text` (a log line in a process's output, ...).
size_t occurrences(const std::string& text, const std::string& needle);

// The lines of `text`, without their line breaks.
std::vector<std::string> lines_of(const std::string& text);

}  // namespace kiqd::test
