#pragma once
// ProcessIdentity: who this process is to a Sidekiq cluster — "hostname:pid:<12 hex>" ($DYNO
// replaces the hostname, as in Sidekiq), fixed for the life of the process — and the static
// "info" JSON its heartbeat publishes (docs/data-model.md#process-identity, #the-info-json).
// The identity becomes part of key names and lock owners that other processes split again
// ("queue:sq|<identity>|<queue>", "<identity> <token>"), so the host name in it is encoded
// (encode_host_name). Immutable.
#include <string>
#include <string_view>
#include <vector>

#include "fetch/queue_order.hpp"
#include "kiqd/config.hpp"

namespace kiqd {

struct ProcessIdentity {
    std::string hostname;  // encoded (encode_host_name): as it appears in the identity
    int pid = 0;
    std::string nonce;     // 12 lowercase hex characters
    std::string identity;  // hostname:pid:nonce
    double started_at = 0;

    static ProcessIdentity create();
    // The heartbeat's "info" field for the configured Sidekiq major version.
    std::string info_json(const Config& config, const QueueOrder& queues) const;
};

// Every capsule's queues, each once: the default capsule's (`order`) first, then the others' in
// file order (Sidekiq 7.3's Launcher#to_data `queues`; the queue gauges of /metrics).
std::vector<std::string> served_queue_names(const Config& config, const QueueOrder& order);

// A host or dyno name as the identity carries it: every byte outside [A-Za-z0-9._-] becomes %XX
// ("web 1|a" → "web%201%7Ca"), so the name cannot contain a separator that key names and lock
// owners are split on ('|', ' ', ':'), a glob character, a control byte or a '%' of its own;
// an ordinary host name (letters, digits, dots, hyphens) is unchanged, so Sidekiq's tools still
// show it. Names longer than 255 bytes (the longest host name) are cut there; an empty name is
// "localhost".
std::string encode_host_name(std::string_view raw);

// Resident set size in kilobytes (VmRSS from /proc/self/status), 0 when unknown.
long long current_rss_kb();

}  // namespace kiqd
