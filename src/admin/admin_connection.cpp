// How the admin commands and `kiqd enqueue` reach Redis (see admin_connection.hpp).
#include "admin/admin_connection.hpp"

#include <chrono>

#include "server/connection_budget.hpp"

namespace kiqd::admin {

redis::ConnectionOptions admin_connection_options(const Config& config, std::string_view role) {
    return named_connection(
        {config.redis.endpoint, config.redis.connect_timeout, std::chrono::milliseconds(5000), "",
         config.redis.sentinel, config.redis.tls_context},
        command_line_identity(), role);
}

std::string describe_redis_error(const redis::Error& error,
                                 const redis::ConnectionOptions& options) {
    std::string what = error.what();
    const std::string where = options.describe();
    if (what.find(where) == std::string::npos) what += " (Redis " + where + ")";
    return what;
}

}  // namespace kiqd::admin
