// ConnectionBudget: connection names and the connection count (see connection_budget.hpp).
#include "server/connection_budget.hpp"

#include <unistd.h>

#include "middleware/limits/concurrency_limit.hpp"

namespace kiqd {

redis::ConnectionOptions named_connection(const redis::ConnectionOptions& base,
                                          std::string_view identity, std::string_view role) {
    redis::ConnectionOptions o = base;
    o.client_name = "kiqd:";
    o.client_name.append(identity).append(":").append(role);
    // CLIENT SETNAME refuses spaces and newlines; a hostname has none, but be sure.
    for (char& c : o.client_name)
        if (c == ' ' || c == '\n' || c == '\r') c = '_';
    return o;
}

std::string command_line_identity() {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    return std::string(host) + ":" + std::to_string(::getpid());
}

ConnectionCount redis_connection_count(const Config& config) {
    ConnectionCount c;
    // Every capsule's processor threads hold one connection each.
    const int threads = total_concurrency(config);
    c.total = static_cast<size_t>(threads) + 4;
    c.parts = std::to_string(threads) + " processors";
    if (!config.capsules.empty()) {
        c.parts += " (default " + std::to_string(config.concurrency);
        for (const auto& cap : config.capsules)
            c.parts += ", " + cap.name + " " + std::to_string(cap.concurrency);
        c.parts += ")";
    }
    c.parts += " + heartbeat, scheduler, pause control, lock keeper";
    if (config.limit_fetch.enabled) {
        c.total += 1;
        c.parts += ", limit fetch heartbeat";
    }
    if (config.fetch == FetchMode::reliable) {
        c.total += 2;
        c.parts += ", orphan recovery, liveness";
        if (config.reliable_fetch.batch_size > 1) {  // ack_flusher.hpp
            c.total += 1;
            c.parts += ", ack flusher";
        }
    }
    if (ConcurrencyLimitMiddleware::configured(config)) {
        c.total += 1;
        c.parts += ", slot keeper";
    }
    if (config.cron_poll_interval > 0) {
        c.total += 1;
        c.parts += ", cron poller";
    }
    if (!config.metrics.listen.empty()) {
        c.total += 1;
        c.parts += ", metrics";
    }
    return c;
}

}  // namespace kiqd
