#pragma once
// The application's own server declarations, made in Ruby, as a runner reports them when it
// boots (runner::AppSettings), taken into kiqd:
//   * at start (adopt_app_declarations, main thread, before the Launcher is built): the app's
//     capsules (`config.capsule`), its job classes' `sidekiq_options` queue and GitLab-style
//     worker attributes (urgency, resource boundary, ...), and max_retries and the dead set's
//     limits, all into the Config the daemon is then built from; and the gems that change
//     Sidekiq's fetch are named, each in a warning unless its runner does what it does;
//   * later (adopt_app_settings, io thread, at the heartbeat after the first runner booted) when
//     the runner was not ready by the start: max_retries and the dead set's limits only.
// kiqd's config wins where it sets the same thing, with one warning naming both values.
#include <spdlog/logger.h>

#include "handlers/runner_protocol.hpp"
#include "job/dead_set.hpp"
#include "job/job_retry.hpp"
#include "kiqd/config.hpp"

namespace kiqd {

// Throws ConfigError when the app asks for a fetch kiqd's config rules out (gitlab-sidekiq-
// fetcher's reliable fetch with capsules, prefetch or queue limits): a start-up error, exit 78.
void adopt_app_declarations(Config& config, const runner::AppSettings& app, spdlog::logger& log);

// Whether the app set up gitlab-sidekiq-fetcher (its runner reported it).
bool uses_gitlab_fetcher(const runner::AppSettings& app);

void adopt_app_settings(const runner::AppSettings& app, const Config& config, JobRetry& retry,
                        DeadSet& dead, spdlog::logger& log);

}  // namespace kiqd
