#pragma once
// ClusterCompat: which Sidekiq major this process presents itself as, and which metrics layouts
// it writes (docs/sidekiq-compatibility.md#compat-auto). With an explicit `compat: 6|7|8` that is
// fixed. With `compat: auto` (the default) it follows the cluster: at start and on each beat the
// heartbeat calls refresh(), which reads the other members of `processes` and the `version` of
// their info JSON (a process without one is Sidekiq 6 or older; kiqd's own "kiqd-…" versions
// carry no Sidekiq major and are left out). The decision is the highest major seen, 6 when the
// process is alone; it picks the heartbeat period and the metrics layouts (7's when a 7 process
// is there, 8's when an 8 one is, both in a mixed cluster, and both when no 7 or 8 process is
// there: the Web UI that reads them may be either). Payload formats do not follow it:
// auto writes float-second timestamps, which 6, 7 and 8 all read. A change is logged once.
// An info JSON never changes for an identity, so each member is read once while it lives.
// Heartbeat (io) thread only, apart from the static helpers.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "kiqd/config.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"
#include "server/execution_metrics.hpp"

namespace kiqd {

// The Sidekiq major of an info JSON's `version` ("7.3.10" → 7); nullopt for one that is not a
// Sidekiq version ("kiqd-0.1.0"). An info without `version` is 6 (Sidekiq wrote it from 7.0).
// nullopt as well for text that is not a JSON object.
std::optional<int> sidekiq_major_of_info(std::string_view info_json);

class ClusterCompat {
  public:
    struct Decision {
        int major = 6;  // presented as; also the heartbeat period (6: 5 s, else 10 s)
        ExecutionMetrics::Layouts metrics;
        bool operator==(const Decision& o) const {
            return major == o.major && metrics == o.metrics;
        }
    };
    // The decision for an explicit compat, or for auto given the other processes' majors.
    static Decision fixed(Compat compat);
    static Decision from_majors(const std::multiset<int>& majors);

    explicit ClusterCompat(const Config& config);
    bool automatic() const { return automatic_; }
    const Decision& decision() const { return decision_; }

    // Auto only: reads the cluster (SMEMBERS processes, then HGET info of members not seen
    // before) and decides again. Returns a log line when the decision changed, else nullopt.
    // Throws redis::Error; the previous decision then stands.
    std::optional<std::string> refresh(redis::Connection& conn, const Keys& keys,
                                       const std::string& self_identity);
    // The log line describing the current decision and what it rests on.
    std::string describe() const;

  private:
    bool automatic_;
    Decision decision_;
    bool decided_once_ = false;
    // Live members read so far → their major (nullopt: not a Sidekiq process, such as kiqd).
    std::map<std::string, std::optional<int>> members_;
    std::multiset<int> majors() const;  // the majors of members_ that have one
};

}  // namespace kiqd
