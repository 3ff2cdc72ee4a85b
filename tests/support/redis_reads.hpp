#pragma once
// Small reads of Redis keys for assertions (lengths, counters, members in order, the JSON they
// hold): one command each, on the caller's connection.
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kiqd/redis/connection.hpp"

namespace kiqd::test {

long long llen(redis::Connection& c, const std::string& key);
long long zcard(redis::Connection& c, const std::string& key);
// A counter written with INCRBY (stat:processed, ...) as a number; 0 while the key is missing.
long long counter(redis::Connection& c, const std::string& key);
// A command's calls since the last CONFIG RESETSTAT (INFO commandstats; `command` in lower case,
// e.g. "evalsha"); 0 when it made none.
long command_calls(redis::Connection& c, const std::string& command);
// A list's or sorted set's members in order.
std::vector<std::string> lrange(redis::Connection& c, const std::string& key);
std::vector<std::string> zrange(redis::Connection& c, const std::string& key);
// The member of a set that holds exactly one (a lone process, working list, ...); else nullopt.
std::optional<std::string> only_member(redis::Connection& c, const std::string& key);

// The EXEC locks recorded in kiqd:unique:held (lock key -> owner), and how many: the hash's
// marker field (lock_keeper.hpp) is not a lock and is left out.
std::map<std::string, std::string> held_locks(redis::Connection& c);
long long held_lock_count(redis::Connection& c);

// Each payload parsed as JSON, in the same order.
std::vector<nlohmann::json> parse_each(const std::vector<std::string>& payloads);

}  // namespace kiqd::test
