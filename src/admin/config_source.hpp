#pragma once
// Which configuration file and which Redis the operator commands (the admin commands, `kiqd
// enqueue`, `kiqd top`) read when the command line does not say: -C, else $KIQD_CONFIG, else
// the packaged /etc/kiqd/kiqd.yml when it is readable (so on a host whose daemon runs from it,
// `kiqd stats` reads the daemon's Redis and not 127.0.0.1), else no file (REDIS_URL, else
// 127.0.0.1:6379). And the words that name that source in the "Redis ..." line that text
// output starts with. Pure functions of their arguments and the file system; called once, on
// the main thread, before the command runs.
#include <optional>
#include <string>

namespace kiqd::admin {

// The packaged configuration file (the systemd unit's -C).
inline constexpr const char* kSystemConfigPath = "/etc/kiqd/kiqd.yml";

struct ConfigChoice {
    std::string path;  // "" = no file
    std::string how;   // "-C", "KIQD_CONFIG" or "default" (the system file); "" without a file
};

// `cli_path` (-C) wins; then `env_path` ($KIQD_CONFIG, when set and not empty, readable or not:
// the operator asked for it, so a mistake shows as an error); then `system_path` when it is
// readable by this user.
ConfigChoice choose_admin_config(const std::string& cli_path, const char* env_path,
                                 const std::string& system_path = kSystemConfigPath);

// Where the Redis URL came from, for humans: "--redis-url", the file ("/etc/x.yml (-C)": it
// has redis.url or sentinels), "REDIS_URL", or "default" (127.0.0.1:6379), the last two
// saying when a file was read that names no Redis. `env_url` is $REDIS_URL.
std::string redis_source(const std::optional<std::string>& flag_url, const ConfigChoice& file,
                         bool file_names_redis, const char* env_url);

}  // namespace kiqd::admin
