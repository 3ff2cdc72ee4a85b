#pragma once
// How the admin commands and `kiqd enqueue` reach Redis: one connection per invocation, opened
// from the validated Config, and the one-line text of a Redis error. The admin CLI is
// single-threaded.
#include <string>
#include <string_view>

#include "kiqd/config.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd::admin {

// The configured endpoint (or sentinel), TLS, connect timeout and a 5 s command timeout; the
// connection is named kiqd:<hostname>:<pid>:<role> (role "admin" or "enqueue").
redis::ConnectionOptions admin_connection_options(const Config& config, std::string_view role);

// The error's text, plus " (Redis <server>)" when it does not name the server already:
// connection errors do, reply errors (WRONGTYPE, NOAUTH, ...) do not.
std::string describe_redis_error(const redis::Error& error,
                                 const redis::ConnectionOptions& options);

}  // namespace kiqd::admin
