// `kiqd fair-fetch status|drain QUEUE` (see fair_fetch_commands.hpp).
#include "admin/fair_fetch_commands.hpp"

#include "admin/exit_codes.hpp"
#include "admin/table.hpp"
#include "common/control_escape.hpp"
#include "fetch/fair_drain.hpp"
#include "kiqd/clock.hpp"

namespace kiqd::admin {

int cmd_fair_fetch(redis::Connection& conn, const Keys& keys, const Config& config,
                   const Request& r, std::ostream& out, std::ostream& err) {
    if ((r.action != "status" && r.action != "drain") || r.targets.size() != 1 ||
        r.targets[0].empty()) {
        err << "kiqd: usage: kiqd fair-fetch status QUEUE | fair-fetch drain QUEUE" << std::endl;
        return kExitNotFound;
    }
    const std::string& queue = r.targets[0];
    if (r.action == "drain") {
        const long long moved = drain_fair_queue(conn, keys, queue);
        if (r.json) {
            out << json_text({{"queue", queue}, {"moved", moved}}) << "\n";
            return 0;
        }
        out << "fair-fetch drain " << escape_control(queue) << ": " << moved
            << " jobs moved back into queue:" << escape_control(queue) << ", in enqueue order\n";
        if (config.fair_fetch.find(queue))
            out << "note: this config still declares fair_fetch for " << escape_control(queue)
                << "; processes running with it split the queue again\n";
        return 0;
    }
    const auto b = fair_backlog(conn, keys, queue, r.limit.value_or(20));
    const double now = epoch_seconds();
    auto age = [&](double at) { return at > 0 ? now - at : 0.0; };
    if (r.json) {
        ojson tenants = ojson::array();
        for (const auto& t : b.top)
            tenants.push_back(
                {{"tenant", t.tenant}, {"jobs", t.jobs}, {"wait", age(t.oldest_enqueued_at)}});
        out << json_text({{"queue", queue},
                          {"unsplit", b.unsplit},
                          {"tenants", tenants},
                          {"other_tenants", b.other_tenants},
                          {"other_jobs", b.other_jobs}})
            << "\n";
        return 0;
    }
    out << "queue " << escape_control(queue) << ": " << b.unsplit << " jobs not split yet, "
        << b.top.size() + b.other_tenants << " tenants waiting\n";
    out << "TENANT\tJOBS\tWAIT_S\n";
    for (const auto& t : b.top)
        out << (t.tenant.empty() ? "(none)" : escape_control(t.tenant)) << "\t" << t.jobs << "\t"
            << static_cast<long long>(age(t.oldest_enqueued_at)) << "\n";
    if (b.other_tenants) out << "(" << b.other_tenants << " others)\t" << b.other_jobs << "\t-\n";
    return 0;
}

}  // namespace kiqd::admin
