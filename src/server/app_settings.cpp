#include "server/app_settings.hpp"

namespace kiqd {
namespace {

// One setting: the app's value is taken unless kiqd's config sets the key; where both do and
// differ, kiqd's wins and says so. Returns the value to use.
long long settle(const char* key, const std::optional<long long>& app, bool config_set,
                 long long config_value, spdlog::logger& log) {
    if (!app || *app == config_value) return config_value;
    if (config_set) {
        log.warn(
            "{}: kiqd's config says {} and the app's Sidekiq configuration says {}; "
            "kiqd's config wins",
            key, config_value, *app);
        return config_value;
    }
    log.info("{}: {}, from the app's Sidekiq configuration", key, *app);
    return *app;
}

}  // namespace

void adopt_app_settings(const runner::AppSettings& app, const Config& config, JobRetry& retry,
                        DeadSet& dead, spdlog::logger& log) {
    retry.set_max_retries(static_cast<int>(
        settle("max_retries", app.max_retries, config.max_retries_set, config.max_retries, log)));
    dead.set_limits(settle("dead_max_jobs", app.dead_max_jobs, config.dead_max_jobs_set,
                           config.dead_max_jobs, log),
                    settle("dead_timeout_in_seconds", app.dead_timeout_seconds,
                           config.dead_timeout_set, config.dead_timeout_seconds, log));
}

}  // namespace kiqd
