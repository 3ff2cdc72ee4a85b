#pragma once
// The fair-fetch series of /metrics (fair_drain.hpp's fair_backlog, read at scrape time):
//   kiqd_fair_tenant_jobs{queue,tenant}          jobs waiting in a tenant's list
//   kiqd_fair_tenant_wait_seconds{queue,tenant}  age of the tenant's oldest job
// for the kTopTenants tenants with the most jobs per fair queue; the rest are summed into
// tenant="other" (jobs) so the series stay bounded whatever the number of tenants, plus
//   kiqd_fair_tenants{queue}       tenants with jobs waiting
//   kiqd_fair_unsplit_jobs{queue}  jobs not yet split into tenant lists
// The tenantless bucket is tenant="". Called on the metrics server's thread, with its connection.
#include <string>
#include <vector>

#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd {

constexpr size_t kTopTenants = 10;

// The Prometheus text of the series above (with HELP/TYPE), for `queues`. Throws redis errors.
std::string render_fair_metrics(redis::Connection& conn, const Keys& keys,
                                const std::vector<std::string>& queues, double now);

}  // namespace kiqd
