// `kiqd unique locks` and `kiqd unique unlock` (see unique_commands.hpp).
#include "admin/unique_commands.hpp"

#include "admin/exit_codes.hpp"
#include "admin/table.hpp"
#include "common/control_escape.hpp"
#include "kiqd/clock.hpp"
#include "middleware/unique/lock_survey.hpp"

namespace kiqd::admin {
namespace {

int cmd_locks(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out) {
    const double now = epoch_seconds();
    auto locks = survey_unique_locks(conn, keys);
    if (r.stale) std::erase_if(locks, [](const SurveyedLock& l) { return l.alive; });
    if (r.json) {
        ojson list = ojson::array();
        for (const auto& l : locks)
            list.push_back({{"kind", l.kind},
                            {"digest", l.digest},
                            {"holder", l.holder},
                            {"age", l.since ? ojson(now - *l.since) : ojson()},
                            {"alive", l.alive},
                            {"stale", !l.alive}});
        out << json_text({{"locks", list}}) << "\n";
        return 0;
    }
    if (locks.empty()) {
        out << (r.stale ? "no stale unique lock\n" : "no unique lock\n");
        return 0;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& l : locks)
        rows.push_back({l.digest, l.kind == "run" ? "run (kiqd)" : "client (gem)", l.holder,
                        l.since ? human_duration(now - *l.since) : "?",
                        l.alive ? "alive" : "STALE: holder gone"});
    print_table(out, {"DIGEST", "LOCK", "HOLDER", "AGE", "STATE"}, rows);
    return 0;
}

}  // namespace

int cmd_unique(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out,
               std::ostream& err) {
    if (r.action.empty() || r.action == "locks") return cmd_locks(conn, keys, r, out);
    if (r.action == "unlock" && r.targets.size() == 1 && !r.targets[0].empty()) {
        const std::string& digest = r.targets[0];
        const long long removed = free_unique_digest(conn, keys, digest);
        if (removed == 0) throw NotFound("no lock of " + digest);
        if (r.json)
            out << json_text({{"digest", digest}, {"unlocked", true}, {"removed", removed}})
                << "\n";
        else
            out << "unlocked " << escape_control(digest) << " (" << removed
                << " keys and entries removed)\n";
        return 0;
    }
    err << "kiqd: usage: kiqd unique locks [--stale] [--json] | kiqd unique unlock DIGEST"
        << std::endl;
    return kExitNotFound;
}

}  // namespace kiqd::admin
