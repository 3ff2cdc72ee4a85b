#pragma once
// LineSink: cuts a child process's stdout or stderr into lines for kiqd's log, each with the
// class and jid of the job the child runs (text `class=… jid=… stdout: …`, or JSON keys), and
// keeps the tail of stderr for error messages. Shared by the exec: handler (one sink per
// command, on the processor thread that runs it) and the runner pools (one per child, on the
// pool's supervisor thread); a sink is used by one thread at a time.
#include <spdlog/logger.h>

#include <cstddef>
#include <deque>
#include <string>
#include <string_view>

namespace kiqd {

// What a line is labelled with; empty fields (and pid 0) are left out.
struct LineLabels {
    std::string_view job_class, jid, runner;
    long long pid = 0;
};

class LineSink {
  public:
    // `log` null: lines only go to `tail` (check-config's boot). `tail` null: no tail kept.
    LineSink(const char* stream, size_t max_line, spdlog::logger* log,
             std::deque<std::string>* tail = nullptr, size_t tail_lines = 0, size_t tail_bytes = 0);

    // Appends what was read; complete lines (and over-long pieces) are emitted.
    void feed(const char* data, size_t n, const LineLabels& labels);
    // End of file: what is left is the last line.
    void finish(const LineLabels& labels);

  private:
    void emit(std::string line, const LineLabels& labels);

    const char* stream_;
    size_t max_line_;
    spdlog::logger* log_;
    std::deque<std::string>* tail_;
    size_t tail_lines_, tail_bytes_;
    std::string buf_;
};

}  // namespace kiqd
