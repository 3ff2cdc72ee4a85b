#include "server/fair_metrics.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "fetch/fair_drain.hpp"
#include "middleware/job_metrics.hpp"

namespace kiqd {

std::string render_fair_metrics(redis::Connection& conn, const Keys& keys,
                                const std::vector<std::string>& queues, double now) {
    if (queues.empty()) return {};
    std::string jobs, waits, tenants, unsplit;
    for (const auto& q : queues) {
        const auto b = fair_backlog(conn, keys, q, kTopTenants);
        const std::string ql = prometheus_escape(q);
        for (const auto& t : b.top) {
            const std::string tl = prometheus_escape(t.tenant);
            jobs += fmt::format("kiqd_fair_tenant_jobs{{queue=\"{}\",tenant=\"{}\"}} {}\n", ql, tl,
                                t.jobs);
            const double wait =
                t.oldest_enqueued_at > 0 ? std::max(0.0, now - t.oldest_enqueued_at) : 0.0;
            waits += fmt::format("kiqd_fair_tenant_wait_seconds{{queue=\"{}\",tenant=\"{}\"}} {}\n",
                                 ql, tl, wait);
        }
        if (b.other_tenants)
            jobs += fmt::format("kiqd_fair_tenant_jobs{{queue=\"{}\",tenant=\"other\"}} {}\n", ql,
                                b.other_jobs);
        tenants += fmt::format("kiqd_fair_tenants{{queue=\"{}\"}} {}\n", ql,
                               static_cast<long long>(b.top.size()) + b.other_tenants);
        unsplit += fmt::format("kiqd_fair_unsplit_jobs{{queue=\"{}\"}} {}\n", ql, b.unsplit);
    }
    return "# HELP kiqd_fair_tenant_jobs Jobs waiting per tenant of a fair queue (top tenants, "
           "the rest as other).\n# TYPE kiqd_fair_tenant_jobs gauge\n" +
           jobs +
           "# HELP kiqd_fair_tenant_wait_seconds Age of each top tenant's oldest job in a fair "
           "queue.\n# TYPE kiqd_fair_tenant_wait_seconds gauge\n" +
           waits +
           "# HELP kiqd_fair_tenants Tenants with jobs waiting in a fair queue.\n"
           "# TYPE kiqd_fair_tenants gauge\n" +
           tenants +
           "# HELP kiqd_fair_unsplit_jobs Jobs of a fair queue not split into tenant lists "
           "yet.\n# TYPE kiqd_fair_unsplit_jobs gauge\n" +
           unsplit;
}

}  // namespace kiqd
