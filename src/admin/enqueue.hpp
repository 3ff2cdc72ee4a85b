#pragma once
// `kiqd enqueue CLASS [ARG_JSON...] [--queue Q] [--at TIME] [--tenant T]`: one job pushed
// through the process client, and the --at TIME parser. The admin CLI is single-threaded.
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "kiqd/config.hpp"

namespace kiqd::admin {

// One job pushed through the process client (client.hpp: the YAML's per-class queue and
// fair-tenant rules apply). Prints the jid. Exit 64 (EX_USAGE) for an argument that is not
// JSON or a TIME that is not understood, 1 when a client middleware stopped the push, 69 when
// Redis fails (exit_codes.hpp).
struct EnqueueRequest {
    std::string job_class;
    std::vector<std::string> args_json;  // each one JSON value
    std::optional<std::string> queue;
    std::optional<std::string> at;
    std::optional<std::string> tenant;  // → the job's `fair_tenant`
};
int run_enqueue(const EnqueueRequest& request, const Config& config, std::ostream& out,
                std::ostream& err);

// A --at TIME: epoch seconds ("1795312741.5"), "+N" with an optional unit s, m, h or d (from
// `now`), or ISO 8601 "YYYY-MM-DDTHH:MM:SS[.frac][Z|±HH:MM]" (a space works for the T; no zone
// means UTC). nullopt when it is none of these.
std::optional<double> parse_enqueue_time(const std::string& text, double now);

}  // namespace kiqd::admin
