#include "middleware/unique/lock_survey.hpp"

#include <map>
#include <set>

#include "kiqd/redis/script.hpp"
#include "middleware/pause/pause_control.hpp"
#include "middleware/unique/lock_keeper.hpp"

namespace kiqd {
namespace {

constexpr long long kSurveyPage = 500;

std::vector<std::string> strings_of(const redis::ReplyRef& r) {
    std::vector<std::string> out;
    for (size_t i = 0; i < r.size(); ++i) out.emplace_back(r[i].str());
    return out;
}

// Removes from `wanted` every jid that occurs in one of `texts`.
void strike(std::set<std::string>& wanted, const std::vector<std::string>& texts) {
    for (const auto& t : texts) {
        for (auto it = wanted.begin(); it != wanted.end();) {
            if (t.find(*it) != std::string::npos)
                it = wanted.erase(it);
            else
                ++it;
        }
        if (wanted.empty()) return;
    }
}

// Pages through one container (list, zset or hash) until every wanted jid is found or it ends.
void search(redis::Connection& conn, const std::string& key, std::set<std::string>& wanted) {
    const std::string type(conn.command({"TYPE", key}).str());
    if (type == "list" || type == "zset") {
        const std::string cmd = type == "list" ? "LRANGE" : "ZRANGE";
        for (long long start = 0; !wanted.empty(); start += kSurveyPage) {
            auto page = strings_of(conn.command(
                {cmd, key, std::to_string(start), std::to_string(start + kSurveyPage - 1)}));
            strike(wanted, page);
            if (static_cast<long long>(page.size()) < kSurveyPage) return;
        }
    } else if (type == "hash") {
        std::string cursor = "0";
        do {
            auto r = conn.command({"HSCAN", key, cursor, "COUNT", std::to_string(kSurveyPage)});
            cursor = std::string(r[0].str());
            strike(wanted, strings_of(r[1]));
        } while (cursor != "0" && !wanted.empty());
    }
}

// The containers where a job that holds a client lock can be: the queues, schedule, retry,
// every process's busy hash (both Sidekiq names), reliable fetch's working lists and the
// parked jobs of paused workers.
std::vector<std::string> containers(redis::Connection& conn, const Keys& keys) {
    std::vector<std::string> out{keys.schedule(), keys.retry()};
    auto r = conn.pipeline({{"SMEMBERS", keys.queues()},
                            {"SMEMBERS", keys.processes()},
                            {"SMEMBERS", keys.working_lists()},
                            {"HKEYS", keys.parked_classes()}});
    for (const auto& q : strings_of(r[0])) out.push_back(keys.queue(q));
    for (const auto& p : strings_of(r[1])) {
        out.push_back(keys.work(p, Compat::v6));
        out.push_back(keys.work(p, Compat::v7));
    }
    for (const auto& w : strings_of(r[2])) out.push_back(w);
    // The parked-classes hash holds class names; each parked set is keyed by the worker name.
    for (const auto& c : strings_of(r[3]))
        out.push_back(keys.parked_jobs(pause_control_worker_name(c)));
    return out;
}

std::string digest_of_exec(const std::string& key, const Keys& keys) {
    std::string d = key;
    const std::string prefix = keys.digest_key("");
    if (d.rfind(prefix, 0) == 0) d = d.substr(prefix.size());
    if (d.size() > 5 && d.compare(d.size() - 5, 5, ":EXEC") == 0) d.resize(d.size() - 5);
    return d;
}

}  // namespace

std::vector<SurveyedLock> survey_unique_locks(redis::Connection& conn, const Keys& keys) {
    std::vector<SurveyedLock> out;
    // kiqd's run locks.
    auto held = conn.command({"HGETALL", keys.unique_held()});
    std::vector<std::string> ids;
    for (size_t i = 0; i + 1 < held.size(); i += 2) {
        if (LockKeeper::is_marker(held[i].str())) continue;
        SurveyedLock l;
        l.kind = "run";
        l.key = std::string(held[i].str());
        l.digest = digest_of_exec(l.key, keys);
        const std::string owner(held[i + 1].str());
        l.holder = LockKeeper::owner_identity(owner);
        l.since = LockKeeper::owner_since(owner);
        ids.push_back(l.holder);
        out.push_back(std::move(l));
    }
    const auto alive = LockKeeper::identities_alive(conn, keys, ids);
    for (size_t i = 0; i < alive.size(); ++i) out[i].alive = alive[i];

    // The gem's client locks: every digest in either ZSET, with the jids of its LOCKED hash.
    std::set<std::string> digests;
    for (const auto& z : {"uniquejobs:digests", "uniquejobs:expiring_digests"}) {
        std::string cursor = "0";
        do {
            auto r = conn.command({"ZSCAN", keys.digest_key(z), cursor, "COUNT", "500"});
            cursor = std::string(r[0].str());
            for (size_t i = 0; i + 1 < r[1].size(); i += 2) digests.emplace(r[1][i].str());
        } while (cursor != "0");
    }
    std::vector<redis::Command> reads;
    for (const auto& d : digests) reads.push_back({"HGETALL", keys.digest_key(d, ":LOCKED")});
    auto locked = reads.empty() ? std::vector<redis::Reply>{} : conn.pipeline(reads);
    std::set<std::string> wanted;
    const size_t first_client = out.size();
    size_t n = 0;
    for (const auto& d : digests) {
        const auto& h = locked[n++];
        for (size_t i = 0; i + 1 < h.size(); i += 2) {
            SurveyedLock l;
            l.kind = "client";
            l.digest = d;
            l.key = keys.digest_key(d, ":LOCKED");
            l.holder = std::string(h[i].str());
            try {
                l.since = std::stod(std::string(h[i + 1].str()));
            } catch (const std::exception&) {
            }
            wanted.insert(l.holder);
            out.push_back(std::move(l));
        }
    }
    if (wanted.empty()) return out;
    std::set<std::string> missing = wanted;
    for (const auto& c : containers(conn, keys)) {
        if (missing.empty()) break;
        search(conn, c, missing);
    }
    for (size_t i = first_client; i < out.size(); ++i) out[i].alive = !missing.count(out[i].holder);
    return out;
}

// KEYS[1] <digest>, KEYS[2] <digest>:LOCKED, KEYS[3] <digest>:INFO, KEYS[4] <digest>:PRIMED,
// KEYS[5] uniquejobs:digests, KEYS[6] uniquejobs:expiring_digests; ARGV[1] the digest (the ZSET
// member), ARGV[2] the jid. Returns 1 when the jid held the lock (then freed), else 0.
constexpr const char* kFreeHolderScript = R"lua(
if redis.call('hdel', KEYS[2], ARGV[2]) == 0 then return 0 end
if redis.call('hlen', KEYS[2]) == 0 then
  redis.call('del', KEYS[1], KEYS[3], KEYS[4])
  redis.call('zrem', KEYS[5], ARGV[1])
  redis.call('zrem', KEYS[6], ARGV[1])
end
return 1
)lua";

long long free_client_holder(redis::Connection& conn, const Keys& keys, const std::string& digest,
                             const std::string& jid) {
    static const redis::Script script(kFreeHolderScript);
    return script
        .run(
            conn,
            {keys.digest_key(digest), keys.digest_key(digest, ":LOCKED"),
             keys.digest_key(digest, ":INFO"), keys.digest_key(digest, ":PRIMED"),
             keys.digest_key("uniquejobs:digests"), keys.digest_key("uniquejobs:expiring_digests")},
            {digest, jid})
        .integer();
}

std::vector<redis::Command> client_lock_delete_commands(const Keys& keys,
                                                        const std::string& digest) {
    redis::Command del{"DEL"};
    for (const char* suffix : {"", ":QUEUED", ":PRIMED", ":LOCKED", ":INFO", ":RUN", ":RUN:QUEUED",
                               ":RUN:PRIMED", ":RUN:LOCKED"})
        del.push_back(keys.digest_key(digest, suffix));
    return {del,
            {"ZREM", keys.digest_key("uniquejobs:digests"), digest},
            {"ZREM", keys.digest_key("uniquejobs:expiring_digests"), digest}};
}

long long free_unique_digest(redis::Connection& conn, const Keys& keys, const std::string& digest) {
    auto commands = client_lock_delete_commands(keys, digest);
    // kiqd's run locks of the digest as well.
    commands.push_back({"DEL", keys.digest_key(digest, ":EXEC"), keys.digest_key(digest, ":WAIT")});
    commands.push_back({"HDEL", keys.unique_held(), keys.digest_key(digest, ":EXEC")});
    long long removed = 0;
    for (const auto& x : conn.pipeline(commands)) removed += x.integer();
    return removed;
}

}  // namespace kiqd
