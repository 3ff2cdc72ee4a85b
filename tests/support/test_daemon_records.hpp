#pragma once
// What kiqd_test_daemon's recording handlers leave in Redis (test_daemon.cpp): one JSON object
// per run in the list kiqd-test:ran, oldest first. Reads for tests that count and inspect runs.
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "kiqd/redis/connection.hpp"

namespace kiqd::test {

inline const std::string kRanKey = "kiqd-test:ran";

// Every recorded run, parsed, oldest first.
std::vector<nlohmann::json> ran_records(redis::Connection& c);
// How many runs are recorded.
long long ran_count(redis::Connection& c);
// The distinct jids among `records`.
std::set<std::string> jids_of(const std::vector<nlohmann::json>& records);

}  // namespace kiqd::test
