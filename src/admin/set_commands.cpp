// `kiqd retries` and `kiqd dead` (see set_commands.hpp).
#include "admin/set_commands.hpp"

#include <algorithm>

#include "admin/exit_codes.hpp"
#include "admin/sidekiq_api.hpp"
#include "admin/table.hpp"
#include "common/control_escape.hpp"

namespace kiqd::admin {
namespace {

ojson entry_json(const SetEntry& e) {
    ojson j = {{"jid", e.jid},
               {"class", e.job_class},
               {"queue", e.queue},
               {"score", e.score},
               {"at", utc_time(e.score)},
               {"error_class", e.error_class},
               {"error_message", e.error_message}};
    j["retry_count"] = e.retry_count ? ojson(*e.retry_count) : ojson(nullptr);
    return j;
}

}  // namespace

int cmd_set(redis::Connection& conn, const Keys& keys, const Config& config, const Request& r,
            std::ostream& out, std::ostream& err) {
    const bool dead = r.command == "dead";
    const std::string set_key = dead ? keys.dead() : keys.retry();
    EntryFilter filter{r.targets, r.job_class};
    const std::string action = r.action.empty() ? "list" : r.action;
    if (action == "list") {
        auto entries = list_entries(conn, set_key, filter);
        if (dead) std::reverse(entries.begin(), entries.end());  // the newest death first
        if (r.limit && entries.size() > *r.limit) entries.resize(*r.limit);
        if (r.json) {
            ojson a = ojson::array();
            for (const auto& e : entries) a.push_back(entry_json(e));
            out << json_text(a) << "\n";
            return 0;
        }
        const double now = epoch_seconds();
        std::vector<std::vector<std::string>> rows;
        for (const auto& e : entries) {
            const std::string when = dead ? human_duration(now - e.score) + " ago"
                                          : "in " + human_duration(e.score - now);
            rows.push_back({e.jid, e.job_class, e.queue,
                            e.retry_count ? std::to_string(*e.retry_count) : "-", when,
                            shorten(e.error_class + ": " + e.error_message, 60)});
        }
        print_table(
            out, {"JID", "CLASS", "QUEUE", "RETRIES", dead ? "DIED" : "NEXT RETRY", "ERROR"}, rows);
        return 0;
    }
    if (action != "retry" && action != "delete") {
        err << "kiqd: " << r.command << ": unknown action '" << escape_control(action)
            << "' (expected list, retry or delete)" << std::endl;
        return kExitNotFound;
    }
    if (filter.jids.empty() && filter.job_class.empty() && !r.all) {
        err << "kiqd: " << r.command << " " << action
            << ": name the entries: JID..., --class CLASS, or --all" << std::endl;
        return kExitNotFound;
    }
    const auto entries = list_entries(conn, set_key, filter);
    for (const auto& jid : filter.jids) {
        const bool found = std::any_of(entries.begin(), entries.end(),
                                       [&](const SetEntry& e) { return e.jid == jid; });
        if (!found) throw NotFound("no entry with jid " + jid + " in the " + set_key + " set");
    }
    RetryResult retried;
    if (action == "retry") retried = retry_entries(conn, keys, set_key, entries, config.compat);
    const size_t done = action == "retry" ? retried.moved : delete_entries(conn, set_key, entries);
    if (r.json) {
        ojson result{{"action", action},
                     {"set", set_key},
                     {"matched", entries.size()},
                     {action == "retry" ? "retried" : "deleted", done}};
        if (retried.refused) {
            result["refused"] = retried.refused;
            result["error"] = retried.refusal;
        }
        out << json_text(result) << "\n";
    } else {
        out << (action == "retry" ? "retried " : "deleted ") << done << " of " << entries.size()
            << " matching " << (dead ? "dead" : "retry") << " entr"
            << (entries.size() == 1 ? "y" : "ies");
        if (retried.refused)
            out << "; " << retried.refused << " left in the set, Redis refused to move "
                << (retried.refused == 1 ? "it" : "them") << ": "
                << escape_control(retried.refusal);
        else if (done < entries.size())
            out << " (the others were moved or removed meanwhile)";
        out << "\n";
    }
    return retried.refused ? kExitUnavailable : 0;
}

}  // namespace kiqd::admin
