#pragma once
// The application's own server settings (made in Ruby, in `Sidekiq.configure_server`), as a
// runner reports them when it boots (runner::AppSettings), taken into kiqd's retries and dead
// set: max_retries (for the failures kiqd decides itself), dead_max_jobs and
// dead_timeout_in_seconds. kiqd's config wins where it sets the same key, with one warning
// naming both values. Called once, on the io thread (Launcher), after the first runner booted.
#include <spdlog/logger.h>

#include "handlers/runner_protocol.hpp"
#include "job/dead_set.hpp"
#include "job/job_retry.hpp"
#include "kiqd/config.hpp"

namespace kiqd {

void adopt_app_settings(const runner::AppSettings& app, const Config& config, JobRetry& retry,
                        DeadSet& dead, spdlog::logger& log);

}  // namespace kiqd
