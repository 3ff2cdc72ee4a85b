#pragma once
// The environment an exec handler's command starts with: kiqd's own, minus what is kiqd's alone.
// A command is job code, not kiqd: it must not be able to log in to Redis as kiqd does, nor talk
// to systemd as kiqd. Withheld (docs/hardening-exec.md lists the same):
//   by name   REDIS_URL, REDIS_PROVIDER and the variable REDIS_PROVIDER names (Sidekiq's way of
//             pointing at the URL), NOTIFY_SOCKET, WATCHDOG_USEC, WATCHDOG_PID, and KIQD_JID,
//             KIQD_CLASS, KIQD_QUEUE, KIQD_RETRY_COUNT (set per job by the exec handler);
//   by value  every variable whose value contains one of kiqd's secrets (kiqd_secrets): this
//             catches the variable named by redis.password_env and any variable a <%= ENV[...] %>
//             in the config drew a password or URL from, whatever its name.
// Everything else passes unchanged. Computed once per handler at startup, on the main thread.
#include <string>
#include <vector>

#include "kiqd/config.hpp"

namespace kiqd {

// The values no child may see: the Redis password (from the URL, redis.password, _file or _env),
// the URL's user-info as written (it may be percent-encoded) and the Sentinel password. Empty
// values are left out.
std::vector<std::string> kiqd_secrets(const Config& config);

// `env` (an environ-style array, null-terminated) without the variables withheld above, as
// "NAME=value" strings in their original order.
std::vector<std::string> child_environment(char** env, const std::vector<std::string>& secrets);

// The environment of a runner pool's processes. A runner is the application itself, not job
// code from outside, so it gets what it would have under `sidekiq`: kiqd's whole environment,
// REDIS_URL and passwords included, less what belongs to kiqd's own process (NOTIFY_SOCKET,
// WATCHDOG_*, and the per-job KIQD_* variables of exec commands). When kiqd's environment has
// no REDIS_URL (nor REDIS_PROVIDER) and `redis.url` is set without sentinels, REDIS_URL is that
// URL, so that the app's Sidekiq client talks to the Redis kiqd serves. Then the pool's `env:`
// adds or overrides variables.
std::vector<std::string> runner_environment(char** env, const Config& config,
                                            const RunnerSpec& spec);

}  // namespace kiqd
