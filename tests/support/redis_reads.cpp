#include "support/redis_reads.hpp"

#include "middleware/unique/lock_keeper.hpp"

namespace kiqd::test {
namespace {

std::vector<std::string> strings(const redis::Reply& r) {
    std::vector<std::string> out;
    for (size_t i = 0; i < r.size(); ++i) out.emplace_back(r[i].str());
    return out;
}

}  // namespace

long long llen(redis::Connection& c, const std::string& key) {
    return c.command({"LLEN", key}).integer();
}

long long zcard(redis::Connection& c, const std::string& key) {
    return c.command({"ZCARD", key}).integer();
}

long command_calls(redis::Connection& c, const std::string& command) {
    const std::string info(c.command({"INFO", "commandstats"}).str());
    const std::string field = "cmdstat_" + command + ":calls=";
    const auto at = info.find(field);
    return at == std::string::npos ? 0L : std::stol(info.substr(at + field.size()));
}

long long counter(redis::Connection& c, const std::string& key) {
    auto v = c.command({"GET", key}).optional_str();
    return v ? std::stoll(*v) : 0;
}

std::vector<std::string> lrange(redis::Connection& c, const std::string& key) {
    return strings(c.command({"LRANGE", key, "0", "-1"}));
}

std::vector<std::string> zrange(redis::Connection& c, const std::string& key) {
    return strings(c.command({"ZRANGE", key, "0", "-1"}));
}

std::optional<std::string> only_member(redis::Connection& c, const std::string& key) {
    auto members = c.command({"SMEMBERS", key});
    if (members.size() != 1) return std::nullopt;
    return std::string(members[0].str());
}

std::vector<nlohmann::json> parse_each(const std::vector<std::string>& payloads) {
    std::vector<nlohmann::json> out;
    for (const auto& p : payloads) out.push_back(nlohmann::json::parse(p));
    return out;
}

std::map<std::string, std::string> held_locks(redis::Connection& c) {
    auto all = c.command({"HGETALL", "kiqd:unique:held"});
    std::map<std::string, std::string> out;
    for (size_t i = 0; i + 1 < all.size(); i += 2)
        if (!LockKeeper::is_marker(all[i].str())) out.emplace(all[i].str(), all[i + 1].str());
    return out;
}

long long held_lock_count(redis::Connection& c) {
    return static_cast<long long>(held_locks(c).size());
}

}  // namespace kiqd::test
