#pragma once
// Where a Redis server is and how to log in: parsed from a redis://, rediss:// or unix:// URL.
// Pure data; parse_redis_url throws std::invalid_argument naming what is wrong.
#include <string>

namespace kiqd::redis {

struct Endpoint {
    std::string host = "127.0.0.1";
    int port = 6379;
    std::string unix_path;  // when set, host/port are ignored
    std::string username;   // ACL user (Redis 6+); empty = "default"
    std::string password;   // never logged: see describe()
    int db = 0;
    bool tls = false;  // rediss://: TLS with ConnectionOptions::tls (kiqd/redis/tls.hpp)

    // host:port/db (or the socket path) without credentials, for log lines.
    std::string describe() const;
};

// redis://[[user]:password@]host[:port][/db], the same with rediss:// (TLS),
// unix:///path/to/socket[?db=N].
Endpoint parse_redis_url(const std::string& url);

}  // namespace kiqd::redis
