// `kiqd retries` and `kiqd dead` (see set_commands.hpp).
#include "admin/set_commands.hpp"

#include <unistd.h>

#include <algorithm>
#include <iostream>

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

int list(redis::Connection& conn, const std::string& set_key, bool dead, const EntryFilter& filter,
         const Request& r, std::ostream& out) {
    auto entries = list_entries(conn, set_key, filter);
    if (dead) std::reverse(entries.begin(), entries.end());  // the newest death first
    if (r.limit && entries.size() > *r.limit) entries.resize(*r.limit);
    const double now = epoch_seconds();
    print_listing(out, r.json, !r.no_headers, entries, entry_json,
                  {"JID", "CLASS", "QUEUE", "RETRIES", dead ? "DIED" : "NEXT RETRY", "ERROR"},
                  [&](const SetEntry& e) -> std::vector<std::string> {
                      return {e.jid,
                              e.job_class,
                              e.queue,
                              e.retry_count ? std::to_string(*e.retry_count) : "-",
                              time_cell(e.score, now, !dead),
                              shorten(e.error_class + ": " + e.error_message, 60)};
                  });
    return 0;
}

// Progress of a bulk action on stderr, only when it is a terminal: one line redrawn in place
// ("\r" and erase-to-end-of-line), holding numbers and the command's own words only. The set's
// size is read only then.
std::function<void(const BulkResult&)> progress_line(redis::Connection& conn,
                                                     const std::string& set_key,
                                                     const std::string& what) {
    if (!::isatty(STDERR_FILENO)) return {};
    const long long total = conn.command({"ZCARD", set_key}).integer();
    return [what, total](const BulkResult& b) {
        std::cerr << "\r\x1b[K" << what << ": " << b.done << " done, " << b.skipped << " skipped, "
                  << b.refused << " refused; " << b.matched << " matched of ~" << total
                  << " entries" << std::flush;
    };
}

}  // namespace

int cmd_set(redis::Connection& conn, const Keys& keys, const Config& config, const Request& r,
            std::ostream& out, std::ostream& err) {
    const bool dead = r.command == "dead";
    const std::string set_key = dead ? keys.dead() : keys.retry();
    EntryFilter filter{r.targets, r.job_class};
    const std::string action = r.action.empty() ? "list" : r.action;
    if (action == "list") return list(conn, set_key, dead, filter, r, out);
    if (action != "retry" && action != "delete" && (dead || action != "kill")) {
        err << "kiqd: " << r.command << ": unknown action '" << escape_control(action)
            << "' (expected list, retry" << (dead ? " or delete)" : ", delete or kill)")
            << std::endl;
        return kExitNotFound;
    }
    if (filter.jids.empty() && filter.job_class.empty() && !r.all) {
        err << "kiqd: " << r.command << " " << action
            << ": name the entries: JID..., --class CLASS, or --all" << std::endl;
        return kExitNotFound;
    }
    const SetActionContext ctx{keys,
                               set_key,
                               action == "retry"    ? SetAction::retry
                               : action == "delete" ? SetAction::remove
                                                    : SetAction::kill,
                               config.compat,
                               config.dead_max_jobs,
                               config.dead_timeout_seconds};
    BulkResult result;
    if (!filter.jids.empty()) {
        // Named entries: all must exist before any is touched.
        const auto entries = list_entries(conn, set_key, filter);
        for (const auto& jid : filter.jids) {
            const bool found = std::any_of(entries.begin(), entries.end(),
                                           [&](const SetEntry& e) { return e.jid == jid; });
            if (!found) throw NotFound("no entry with jid " + jid + " in the " + set_key + " set");
        }
        act_on_entries(conn, ctx, entries, result);
    } else {
        auto progress = progress_line(conn, set_key, r.command + " " + action);
        result = act_on_matching(conn, ctx, filter, progress);
        if (progress) std::cerr << "\r\x1b[K" << std::flush;
    }
    const std::string done_word = action == "retry"    ? "retried"
                                  : action == "delete" ? "deleted"
                                                       : "killed";
    if (r.json) {
        ojson j{{"action", action},
                {"set", set_key},
                {"matched", result.matched},
                {done_word, result.done},
                {"skipped", result.skipped}};
        if (action == "kill") j["trimmed"] = result.trimmed;
        if (result.refused) {
            j["refused"] = result.refused;
            j["error"] = result.refusal;
        }
        out << json_text(j) << "\n";
    } else {
        out << done_word << " " << result.done << " of " << result.matched << " matching "
            << (dead ? "dead" : "retry") << " entr" << (result.matched == 1 ? "y" : "ies");
        if (result.skipped)
            out << "; " << result.skipped
                << " skipped (moved or deleted meanwhile by another client)";
        if (result.refused)
            out << "; " << result.refused
                << " left in the set, refused: " << escape_control(result.refusal);
        if (result.trimmed)
            out << "; the dead set was trimmed by " << result.trimmed
                << " (dead_max_jobs, dead_timeout_in_seconds)";
        out << "\n";
    }
    return result.redis_refused ? kExitUnavailable : result.refused ? kExitNotFound : 0;
}

}  // namespace kiqd::admin
