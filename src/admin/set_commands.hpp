#pragma once
// `kiqd retries|dead [list|retry|delete]`: list the retry or dead set (table or JSON), or retry
// or delete the entries named by JID, --class or --all. The admin CLI is single-threaded.
#include <ostream>

#include "admin/request.hpp"
#include "kiqd/config.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd::admin {

// Throws NotFound for a named JID that is not in the set (before acting on any entry).
int cmd_set(redis::Connection& conn, const Keys& keys, const Config& config, const Request& r,
            std::ostream& out, std::ostream& err);

}  // namespace kiqd::admin
