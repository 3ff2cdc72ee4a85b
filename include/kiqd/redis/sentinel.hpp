#pragma once
// Sentinel: where to ask for the current Redis master when Redis runs under Redis Sentinel, and
// the question itself (SENTINEL get-master-addr-by-name). Connection::connect uses it on every
// (re)connect, so after a fail-over the next connect finds the promoted replica. Pure data plus
// a blocking function; it keeps no state of its own, so any thread may call it.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiqd/redis/tls.hpp"

namespace kiqd::redis {

struct SentinelAddress {
    std::string host;
    int port = 26379;
    std::string describe() const;  // host:port ([::1]:port for IPv6)
};

struct SentinelOptions {
    std::vector<SentinelAddress> sentinels;  // empty: no Sentinel, connect to the endpoint itself
    std::string master_name;
    std::string username;  // for the sentinels themselves (Sentinel's own ACL), may be empty
    std::string password;  // for the sentinels themselves; never logged
    // Connect and reply timeout per sentinel: a dead sentinel must not delay the next one long.
    std::chrono::milliseconds timeout{500};
    // Set: the sentinels are asked over TLS with this context (redis.sentinel_tls); the master
    // they name is reached as the URL says (rediss:// or redis://).
    std::shared_ptr<const TlsContext> tls;

    bool enabled() const { return !sentinels.empty(); }
    // "master 'mymaster' via sentinels 127.0.0.1:26379,127.0.0.1:26380", without credentials.
    std::string describe() const;
};

// "host:port", "host" (port 26379) or "[v6addr]:port". Throws std::invalid_argument.
SentinelAddress parse_sentinel_address(const std::string& text);

struct MasterAddress {
    std::string host;
    int port = 0;
};

// Asks one sentinel for the master's address. nullopt when that sentinel does not know the
// master name; throws redis::Error (IoError, ReplyError, ...) when it cannot be asked.
std::optional<MasterAddress> ask_sentinel(const SentinelOptions& options,
                                          const SentinelAddress& sentinel);

}  // namespace kiqd::redis
