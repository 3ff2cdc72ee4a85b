// Which configuration and Redis the operator commands read (see config_source.hpp).
#include "admin/config_source.hpp"

#include <unistd.h>

namespace kiqd::admin {

ConfigChoice choose_admin_config(const std::string& cli_path, const char* env_path,
                                 const std::string& system_path) {
    if (!cli_path.empty()) return {cli_path, "-C"};
    if (env_path && *env_path) return {env_path, "KIQD_CONFIG"};
    // access(2) with R_OK: the packaged file is root:kiqd 0640, so an operator outside the kiqd
    // group falls through to REDIS_URL instead of failing on a file they cannot read.
    if (!system_path.empty() && ::access(system_path.c_str(), R_OK) == 0)
        return {system_path, "default"};
    return {};
}

std::string redis_source(const std::optional<std::string>& flag_url, const ConfigChoice& file,
                         bool file_names_redis, const char* env_url) {
    if (flag_url) return "--redis-url";
    const std::string via = file.how == "default" ? "" : " (" + file.how + ")";
    if (!file.path.empty() && file_names_redis) return file.path + via;
    const std::string rest = file.path.empty() ? "" : ", " + file.path + via + " has no redis.url";
    if (env_url && *env_url) return "REDIS_URL" + rest;
    return "default" + rest;
}

}  // namespace kiqd::admin
