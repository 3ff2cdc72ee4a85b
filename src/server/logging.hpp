#pragma once
// Builds kiqd's logger: asynchronous (a bounded queue drained by one background thread, so a
// log line per job costs the processor a queue push, not a write), text or JSON lines, UTC
// timestamps, to stdout or a file (reopened on SIGHUP). The returned logger is thread-safe.
#include <spdlog/logger.h>

#include <memory>

#include "kiqd/config.hpp"

namespace kiqd {

std::shared_ptr<spdlog::logger> make_logger(const LoggingConfig& config, bool verbose);

// Reopens every log file made by make_logger at its configured path (SIGHUP, after logrotate
// renamed it); lines written from then on go to the file now at that path. Thread-safe.
void reopen_log_files();

// Writes out every line `log` has taken so far, for a process about to _Exit (which would drop
// what the asynchronous logger's thread has not written yet). Waits at most 2 s.
void drain_log(spdlog::logger& log) noexcept;

}  // namespace kiqd
