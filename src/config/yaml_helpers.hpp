#pragma once
// The readers every config section uses: typed scalars whose errors are ConfigErrors naming the
// key and its line, Sidekiq's symbol keys and values (":concurrency:", ":high"), and read_map,
// which hands each key of a section to its reader and rejects the unknown ones.
// Config is built once on the main thread, then read-only; these run only while it is built.
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>

#include "kiqd/config.hpp"

namespace kiqd::config_detail {

// 1-based line of a node, -1 when unknown (as ConfigError takes it).
int line_of(const YAML::Node& n);

// Sidekiq symbolises keys, so ":concurrency:" and "concurrency:" mean the same.
std::string normalize_key(std::string key);

// ConfigError(key, "must be <expected>") at the node's line.
[[noreturn]] void type_error(const std::string& key, const YAML::Node& n, const char* expected);

std::string as_string(const std::string& key, const YAML::Node& n);
long long as_int(const std::string& key, const YAML::Node& n);
double as_number(const std::string& key, const YAML::Node& n);
bool as_bool(const std::string& key, const YAML::Node& n);

// A Ruby symbol's leading ':' dropped (":default" → "default").
std::string strip_symbol(std::string s);

// A scalar (else "must be <expected>") with a Ruby symbol's leading ':' dropped.
std::string as_symbol(const std::string& key, const YAML::Node& n,
                      const char* expected = "a string");

// The longest duration any key accepts (366 days): every duration becomes a deadline
// `now + duration`, which must not overflow, and a year is beyond any sane timeout or interval.
constexpr long long kMaxDurationSeconds = 366LL * 24 * 3600;
// "must be at most 31622400 seconds (366 days)", the message of every duration beyond it.
std::string max_duration_text();
// ConfigError at n's line unless |seconds| is finite and within kMaxDurationSeconds (the sign
// is each caller's own check).
void check_duration(const std::string& key, double seconds, const YAML::Node& n);

// Seconds (a number) as milliseconds, within check_duration's bound.
long long seconds_to_ms(const std::string& key, const YAML::Node& n);
// A duration in whole seconds (an integer) / in seconds (a number), within the same bound.
long long whole_seconds(const std::string& key, const YAML::Node& n);
double seconds_number(const std::string& key, const YAML::Node& n);
std::chrono::milliseconds positive_seconds(const std::string& key, const YAML::Node& n);

std::string non_empty_string(const std::string& key, const YAML::Node& n);

// Queue names as Redis keys and Sidekiq's web UI take them: letters, digits, _ : . - only.
void check_queue_name(const std::string& key, const std::string& name, int line = -1);

// What reads one key of a section: `key` is its full name for messages ("redis.url").
struct KeyReader {
    std::string_view name;  // as written, without Sidekiq's leading ':'
    std::function<void(const std::string& key, const YAML::Node& value)> read;
};

// For a key no KeyReader names: true when it was handled, false when it is unknown.
using OtherKeyReader = std::function<bool(const std::string& name, const std::string& key,
                                          const YAML::Node& key_node, const YAML::Node& value)>;

// Hands every `name: value` of the map `section`, in file order, to the reader of that name
// (Sidekiq's leading ':' dropped) with the full key "prefix.name" ("name" when prefix is empty).
// A name no reader has goes to `other` when given; unhandled, it is ConfigError(key, unknown)
// at the name's line.
void read_map(const YAML::Node& section, const std::string& prefix,
              std::initializer_list<KeyReader> readers, const char* unknown = "unknown key",
              const OtherKeyReader& other = nullptr);

}  // namespace kiqd::config_detail
