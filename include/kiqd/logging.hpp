#pragma once
// Builds kiqd's logger: asynchronous (a bounded queue drained by one background thread, so a
// log line per job costs the processor a queue push, not a write), text or JSON lines, UTC
// timestamps, to stdout or a file. The returned logger is thread-safe.
#include <spdlog/logger.h>

#include <memory>

#include "kiqd/config.hpp"

namespace kiqd {

std::shared_ptr<spdlog::logger> make_logger(const LoggingConfig& config, bool verbose);

}  // namespace kiqd
