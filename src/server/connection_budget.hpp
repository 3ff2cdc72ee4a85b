#pragma once
// ConnectionBudget: what each Redis connection of a kiqd process is called and how many there
// are. Every connection sends CLIENT SETNAME kiqd:<identity>:<role> ("kiqd:web-1:4021:a1b2c3:
// processor-3", "...:heartbeat"), so CLIENT LIST on the server shows which process and which
// thread holds it; redis_connection_count() is the number `kiqd check-config` prints and the
// README documents, for sizing Redis's maxclients. Pure functions: any thread.
#include <cstddef>
#include <string>
#include <string_view>

#include "kiqd/config.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd {

// `base` with client_name kiqd:<identity>:<role>.
redis::ConnectionOptions named_connection(const redis::ConnectionOptions& base,
                                          std::string_view identity, std::string_view role);

// The identity of a short-lived command-line process (admin commands, `kiqd enqueue`), which
// has no process record: <hostname>:<pid>.
std::string command_line_identity();

struct ConnectionCount {
    size_t total;       // long-lived connections of one daemon process with this config
    std::string parts;  // "10 processors + heartbeat, scheduler, ..." for check-config
};

// The long-lived connections a daemon with `config` opens (see docs/redis.md): concurrency (every
// capsule's) + 4,
// + 2 with reliable fetch, + 1 with concurrency limits, + 1 with the metrics endpoint.
ConnectionCount redis_connection_count(const Config& config);

}  // namespace kiqd
