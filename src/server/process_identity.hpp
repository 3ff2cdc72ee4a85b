#pragma once
// ProcessIdentity: who this process is to a Sidekiq cluster — "hostname:pid:<12 hex>" ($DYNO
// replaces the hostname, as in Sidekiq), fixed for the life of the process — and the static
// "info" JSON its heartbeat publishes (docs/data-model.md#process-identity, #the-info-json).
// Immutable.
#include <string>

#include "fetch/queue_order.hpp"
#include "kiqd/config.hpp"

namespace kiqd {

struct ProcessIdentity {
    std::string hostname;
    int pid = 0;
    std::string nonce;     // 12 lowercase hex characters
    std::string identity;  // hostname:pid:nonce
    double started_at = 0;

    static ProcessIdentity create();
    // The heartbeat's "info" field for the configured Sidekiq major version.
    std::string info_json(const Config& config, const QueueOrder& queues) const;
};

// Resident set size in kilobytes (VmRSS from /proc/self/status), 0 when unknown.
long long current_rss_kb();

}  // namespace kiqd
