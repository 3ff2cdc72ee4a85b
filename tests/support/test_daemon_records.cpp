#include "support/test_daemon_records.hpp"

#include "support/redis_reads.hpp"

namespace kiqd::test {

std::vector<nlohmann::json> ran_records(redis::Connection& c) {
    return parse_each(lrange(c, kRanKey));
}

long long ran_count(redis::Connection& c) {
    return llen(c, kRanKey);
}

std::set<std::string> jids_of(const std::vector<nlohmann::json>& records) {
    std::set<std::string> jids;
    for (const auto& r : records) jids.insert(r.at("jid").get<std::string>());
    return jids;
}

}  // namespace kiqd::test
