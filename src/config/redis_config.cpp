// The `redis:` section: URL, key prefix, AUTH (one password source), Sentinel, TLS; and, once
// command-line overrides are applied, the endpoint kiqd connects to and the TLS context it uses.
// Config is built once on the main thread, then read-only.
#include "config/redis_config.hpp"

#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include "config/yaml_helpers.hpp"
#include "kiqd/redis/endpoint.hpp"

namespace kiqd::config_detail {
namespace {

// redis.password / password_file / password_env: exactly one may be given (the URL's password
// is checked in validate_config, because the URL may come from REDIS_URL). Messages name the
// key, the file or the variable, never the password.
void set_password_source(RedisConfig& r, const std::string& key, const YAML::Node& n) {
    const std::string value = non_empty_string(key, n);
    if (!r.password_key.empty())
        throw ConfigError(key,
                          "conflicts with " + r.password_key + " (line " +
                              std::to_string(r.password_line) +
                              "): give the Redis password in exactly one place",
                          line_of(n));
    std::string password;
    if (key == "redis.password") {
        password = value;
    } else if (key == "redis.password_file") {
        std::ifstream in(value);
        if (!in) throw ConfigError(key, "cannot read '" + value + "'", line_of(n));
        std::getline(in, password);
        if (!password.empty() && password.back() == '\r') password.pop_back();
        if (password.empty())
            throw ConfigError(key, "the first line of '" + value + "' is empty", line_of(n));
    } else {
        const char* env = std::getenv(value.c_str());
        if (!env || !*env)
            throw ConfigError(key, "environment variable " + value + " is not set or empty",
                              line_of(n));
        password = env;
    }
    r.password = std::move(password);
    r.password_key = key;
    r.password_line = line_of(n);
}

// redis.sentinels: ["host:port", ...] or [{host: h, port: p}, ...] (redis-rb's shape).
void parse_sentinels(RedisConfig& r, const std::string& key, const YAML::Node& n) {
    if (!n.IsSequence() || n.size() == 0)
        type_error(key, n, "a non-empty list of host:port addresses");
    r.sentinel.sentinels.clear();
    r.sentinel_line = line_of(n);
    for (size_t i = 0; i < n.size(); ++i) {
        const auto& item = n[i];
        const std::string ikey = key + "[" + std::to_string(i) + "]";
        try {
            if (item.IsScalar()) {
                r.sentinel.sentinels.push_back(redis::parse_sentinel_address(item.Scalar()));
            } else if (item.IsMap() && item["host"]) {
                const auto host = as_string(ikey + ".host", item["host"]);
                const auto port = item["port"] ? as_int(ikey + ".port", item["port"]) : 26379;
                if (port < 1 || port > 65535)
                    throw ConfigError(ikey + ".port", "must be between 1 and 65535",
                                      line_of(item["port"]));
                r.sentinel.sentinels.push_back(
                    redis::parse_sentinel_address(host + ":" + std::to_string(port)));
            } else {
                type_error(ikey, item, "host:port or {host: h, port: p}");
            }
        } catch (const std::invalid_argument& e) {
            throw ConfigError(ikey, e.what(), line_of(item));
        }
    }
}

// The redis.tls keys, each with the environment variable that gives it when the YAML does not.
struct TlsKey {
    const char* name;
    const char* env;
    std::string redis::TlsOptions::*field;  // null for `verify` (a bool)
};
const TlsKey kTlsKeys[] = {
    {"ca_file", "REDIS_TLS_CA_FILE", &redis::TlsOptions::ca_file},
    {"ca_path", "REDIS_TLS_CA_PATH", &redis::TlsOptions::ca_path},
    {"cert_file", "REDIS_TLS_CERT_FILE", &redis::TlsOptions::cert_file},
    {"key_file", "REDIS_TLS_KEY_FILE", &redis::TlsOptions::key_file},
    {"server_name", "REDIS_TLS_SERVER_NAME", &redis::TlsOptions::server_name},
    {"verify", "REDIS_TLS_VERIFY", nullptr},
    {"min_version", "REDIS_TLS_MIN_VERSION", &redis::TlsOptions::min_version},
};

// `peer` (or true) checks the server's certificate and name; `none` (or false) checks nothing.
bool parse_verify(const std::string& key, const std::string& value, int line) {
    if (value == "peer" || value == "true") return true;
    if (value == "none" || value == "false") return false;
    throw ConfigError(key, "must be peer or none, not '" + value + "'", line);
}

// redis.tls: {ca_file: ..., verify: peer|none, min_version: "1.2", ...}.
void parse_tls(RedisConfig& r, const std::string& key, const YAML::Node& n) {
    if (!n.IsMap())
        type_error(key, n,
                   "a map (ca_file, ca_path, cert_file, key_file, "
                   "server_name, verify, min_version)");
    r.tls_line = line_of(n);
    for (const auto& kv : n) {
        const std::string name = normalize_key(kv.first.Scalar());
        const std::string full = key + "." + name;
        const TlsKey* k = nullptr;
        for (const auto& candidate : kTlsKeys)
            if (name == candidate.name) k = &candidate;
        if (!k) throw ConfigError(full, "unknown key", line_of(kv.first));
        r.tls_keys[k->name] = line_of(kv.second);
        if (k->field)
            r.tls.*k->field = non_empty_string(full, kv.second);
        else
            r.tls.verify_peer = parse_verify(full, as_string(full, kv.second), line_of(kv.second));
    }
}

// After the URL is known: REDIS_TLS_* for the keys the YAML left out, then the context (the
// files are read now: a bad one is exit 78 naming its key).
void resolve_tls(RedisConfig& r) {
    const bool sentinel_tls = r.sentinel.enabled() && r.sentinel_tls.value_or(r.endpoint.tls);
    if (!r.endpoint.tls && !sentinel_tls) {
        if (r.tls_line >= 0)
            throw ConfigError("redis.tls",
                              "is only used with a rediss:// URL (redis.url or "
                              "REDIS_URL) or redis.sentinel_tls",
                              r.tls_line);
        return;
    }
    std::map<std::string, std::string> from_env;  // key → variable that set it
    for (const auto& k : kTlsKeys) {
        if (r.tls_keys.count(k.name)) continue;
        const char* env = std::getenv(k.env);
        if (!env || !*env) continue;
        from_env[k.name] = k.env;
        if (k.field)
            r.tls.*k.field = env;
        else
            r.tls.verify_peer = parse_verify(std::string(k.env) + " (redis.tls.verify)", env, -1);
    }
    try {
        r.tls_context = redis::TlsContext::create(r.tls);
    } catch (const redis::TlsSetupError& e) {
        const std::string field = e.field().empty() ? "" : "." + e.field();
        std::string key = "redis.tls" + field;
        int line = r.tls_line;
        if (auto it = from_env.find(e.field()); it != from_env.end()) {
            key = it->second + " (" + key + ")";
            line = -1;
        } else if (auto at = r.tls_keys.find(e.field()); at != r.tls_keys.end()) {
            line = at->second;
        }
        throw ConfigError(key, e.what(), line);
    }
    if (sentinel_tls) r.sentinel.tls = r.tls_context;
}

}  // namespace

void parse_redis(const YAML::Node& n, RedisConfig& r) {
    if (n.IsScalar()) {  // redis: redis://host:6379/0
        r.url = n.Scalar();
        return;
    }
    if (!n.IsMap()) type_error("redis", n, "a URL or a map");
    // An environment's redis: (production: {redis: ...}) replaces the top level's password.
    for (const auto& kv : n) {
        const std::string k = normalize_key(kv.first.Scalar());
        if (k == "password" || k == "password_file" || k == "password_env") {
            r.password.clear();
            r.password_key.clear();
        }
    }
    auto key_prefix = [&](const auto& key, const auto& v) { r.key_prefix = as_string(key, v); };
    auto password = [&](const auto& key, const auto& v) { set_password_source(r, key, v); };
    read_map(
        n, "redis",
        {{"url", [&](const auto& key, const auto& v) { r.url = as_string(key, v); }},
         {"key_prefix", key_prefix},
         {"namespace", key_prefix},
         {"connect_timeout",
          [&](const auto& key, const auto& v) { r.connect_timeout = positive_seconds(key, v); }},
         {"username",
          [&](const auto& key, const auto& v) {
              r.username = non_empty_string(key, v);
              r.username_line = line_of(v);
          }},
         {"password", password},
         {"password_file", password},
         {"password_env", password},
         {"sentinels", [&](const auto& key, const auto& v) { parse_sentinels(r, key, v); }},
         {"master_name", [&](const auto& key,
                             const auto& v) { r.sentinel.master_name = non_empty_string(key, v); }},
         {"tls", [&](const auto& key, const auto& v) { parse_tls(r, key, v); }},
         {"sentinel_tls",
          [&](const auto& key, const auto& v) {
              r.sentinel_tls = as_bool(key, v);
              r.sentinel_tls_line = line_of(v);
          }},
         {"sentinel_username",
          [&](const auto& key, const auto& v) { r.sentinel.username = non_empty_string(key, v); }},
         {"sentinel_password", [&](const auto& key, const auto& v) {
              r.sentinel.password = non_empty_string(key, v);
          }}});
    if (r.sentinel.sentinels.empty()) {
        for (const char* k :
             {"master_name", "sentinel_username", "sentinel_password", "sentinel_tls"})
            if (n[k])
                throw ConfigError(std::string("redis.") + k, "is only used with redis.sentinels",
                                  line_of(n[k]));
    } else if (r.sentinel.master_name.empty()) {
        throw ConfigError("redis.master_name",
                          "is required with redis.sentinels (the name the sentinels monitor)",
                          r.sentinel_line);
    }
}

void resolve_redis_endpoint(RedisConfig& r) {
    if (r.url.empty()) {
        const char* env = std::getenv("REDIS_URL");
        r.url = env && *env ? env : "redis://127.0.0.1:6379/0";
    }
    try {
        r.endpoint = redis::parse_redis_url(r.url);
    } catch (const std::invalid_argument& e) {
        throw ConfigError("redis.url", e.what());
    }
    // The URL (redis.url or REDIS_URL) is one password source among the others: never two.
    if (!r.password_key.empty()) {
        if (!r.endpoint.password.empty())
            throw ConfigError(r.password_key,
                              "conflicts with the password in the Redis URL (redis.url or "
                              "REDIS_URL): give the Redis password in exactly one place",
                              r.password_line);
        r.endpoint.password = r.password;
    }
    if (!r.username.empty()) {
        if (!r.endpoint.username.empty())
            throw ConfigError("redis.username", "conflicts with the user name in the Redis URL",
                              r.username_line);
        r.endpoint.username = r.username;
    }
    if (!r.endpoint.username.empty() && r.endpoint.password.empty())
        throw ConfigError("redis.username",
                          "needs a password (redis.password, redis.password_file, "
                          "redis.password_env or the URL)",
                          r.username_line);
    if (r.sentinel.enabled() && !r.endpoint.unix_path.empty())
        throw ConfigError("redis.sentinels", "cannot be combined with a unix:// Redis URL",
                          r.sentinel_line);
    resolve_tls(r);
}

}  // namespace kiqd::config_detail
