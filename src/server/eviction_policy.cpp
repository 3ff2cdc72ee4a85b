#include "server/eviction_policy.hpp"

#include <fmt/format.h>

#include "kiqd/redis/errors.hpp"

namespace kiqd {

std::optional<std::string> read_maxmemory_policy(redis::Connection& conn) {
    try {
        const auto reply = conn.command({"CONFIG", "GET", "maxmemory-policy"});
        // RESP2: [name, value]; a managed Redis may answer an empty array instead of an error.
        if (reply.is_array() && reply.size() == 2) return std::string(reply[1].str());
    } catch (const redis::ReplyError&) {
        // Refused (CONFIG renamed or disabled, no permission): INFO may still say.
    }
    const std::string info(conn.command({"INFO", "memory"}).str());
    const std::string field = "maxmemory_policy:";
    const auto at = info.find(field);
    if (at == std::string::npos) return std::nullopt;
    const auto start = at + field.size();
    const auto end = info.find_first_of("\r\n", start);
    std::string policy = info.substr(start, end == std::string::npos ? end : end - start);
    if (policy.empty()) return std::nullopt;
    return policy;
}

std::optional<std::string> eviction_warning(const std::optional<std::string>& policy) {
    if (!policy)
        return std::string(
            "cannot tell Redis's maxmemory-policy (CONFIG GET refused, INFO memory does not "
            "say): make sure it is noeviction; an evicting Redis loses jobs in silence when it "
            "reaches maxmemory");
    if (*policy == "noeviction") return std::nullopt;
    const bool volatile_only = policy->rfind("volatile-", 0) == 0;
    return fmt::format(
        "Redis maxmemory-policy is {}, not noeviction: when Redis reaches maxmemory it evicts "
        "{}, and kiqd loses what they hold without a trace ({}). Set maxmemory-policy "
        "noeviction: Redis then refuses writes when full, which kiqd waits out",
        *policy, volatile_only ? "keys that have a TTL" : "any key",
        volatile_only ? "unique locks, concurrency slots, reliable fetch's liveness keys (its "
                        "working lists then look orphaned), the processes' records"
                      : "queues with their jobs, the schedule, retry and dead sets, reliable "
                        "fetch's working lists, unique locks, concurrency slots");
}

void EvictionPolicyWatch::check(redis::Connection& conn) {
    const auto policy = read_maxmemory_policy(conn);
    if (checked_ && policy == last_) return;
    const bool first = !checked_;
    checked_ = true;
    last_ = policy;
    if (auto warning = eviction_warning(policy))
        log_.warn("{}", *warning);
    else if (!first)
        log_.info("Redis maxmemory-policy is noeviction now");
}

}  // namespace kiqd
