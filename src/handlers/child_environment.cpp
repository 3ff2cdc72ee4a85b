#include "handlers/child_environment.hpp"

#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>

namespace kiqd {
namespace {

// The password of a redis:// URL as written there (percent-encoded or not), or "".
std::string url_password_as_written(std::string_view url) {
    constexpr std::string_view scheme = "redis://";
    if (url.substr(0, scheme.size()) != scheme) return {};
    url.remove_prefix(scheme.size());
    const auto at = url.rfind('@');
    if (at == std::string_view::npos) return {};
    const auto userinfo = url.substr(0, at);
    const auto colon = userinfo.find(':');
    return std::string(colon == std::string_view::npos ? userinfo : userinfo.substr(colon + 1));
}

// "NAME=value" split at the first '='; nullopt for an entry without one.
std::optional<std::pair<std::string_view, std::string_view>> split(std::string_view entry) {
    const auto eq = entry.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    return std::pair{entry.substr(0, eq), entry.substr(eq + 1)};
}

}  // namespace

std::vector<std::string> kiqd_secrets(const Config& config) {
    const auto& r = config.redis;
    std::vector<std::string> secrets;
    for (const std::string& s :
         {r.password, r.endpoint.password, url_password_as_written(r.url), r.sentinel.password}) {
        if (!s.empty() && std::find(secrets.begin(), secrets.end(), s) == secrets.end())
            secrets.push_back(s);
    }
    return secrets;
}

std::vector<std::string> child_environment(char** env, const std::vector<std::string>& secrets) {
    std::vector<std::string_view> withheld_names{
        "REDIS_URL", "REDIS_PROVIDER", "NOTIFY_SOCKET", "WATCHDOG_USEC",   "WATCHDOG_PID",
        "KIQD_JID",  "KIQD_CLASS",     "KIQD_QUEUE",    "KIQD_RETRY_COUNT"};
    for (char** e = env; e && *e; ++e)
        if (auto kv = split(*e); kv && kv->first == "REDIS_PROVIDER" && !kv->second.empty())
            withheld_names.push_back(kv->second);  // points into env, which outlives this call
    std::vector<std::string> out;
    for (char** e = env; e && *e; ++e) {
        const auto kv = split(*e);
        if (!kv) continue;  // not NAME=value: nothing a child could use
        const auto& [name, value] = *kv;
        if (std::find(withheld_names.begin(), withheld_names.end(), name) != withheld_names.end())
            continue;
        // value = value: clang 14 cannot capture a structured binding (the fuzz build uses it).
        if (std::any_of(secrets.begin(), secrets.end(),
                        [&, value = value](const std::string& secret) {
                            return value.find(secret) != std::string_view::npos;
                        }))
            continue;
        out.emplace_back(*e);
    }
    return out;
}

std::vector<std::string> runner_environment(char** env, const Config& config,
                                            const RunnerSpec& spec) {
    static constexpr std::string_view kiqd_own[] = {
        "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID",     "KIQD_JID",
        "KIQD_CLASS",    "KIQD_QUEUE",    "KIQD_RETRY_COUNT",
    };
    std::vector<std::string> out;
    bool has_redis_url = false;
    for (char** e = env; e && *e; ++e) {
        const auto kv = split(*e);
        if (!kv) continue;
        const auto name = kv->first;
        if (std::find(std::begin(kiqd_own), std::end(kiqd_own), name) != std::end(kiqd_own) ||
            name.substr(0, 12) == "KIQD_RUNNER_")
            continue;
        if (name == "REDIS_URL" || name == "REDIS_PROVIDER") has_redis_url = true;
        out.emplace_back(*e);
    }
    if (!has_redis_url && !config.redis.url.empty() && config.redis.sentinel.sentinels.empty())
        out.push_back("REDIS_URL=" + config.redis.url);
    // A runner that runs Sidekiq's retry decisions itself (docs/runner-protocol.md) uses the
    // app's max_retries, unless kiqd's config sets one: that one wins.
    if (config.max_retries_set)
        out.push_back("KIQD_RUNNER_MAX_RETRIES=" + std::to_string(config.max_retries));
    for (const auto& [name, value] : spec.env) {
        const std::string prefix = name + "=";
        auto it = std::find_if(out.begin(), out.end(), [&](const std::string& entry) {
            return entry.compare(0, prefix.size(), prefix) == 0;
        });
        if (it != out.end())
            *it = prefix + value;
        else
            out.push_back(prefix + value);
    }
    return out;
}

}  // namespace kiqd
