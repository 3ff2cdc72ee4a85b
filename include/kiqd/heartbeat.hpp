#pragma once
// Heartbeat: makes this process a member of the Sidekiq cluster (sidekiq-data-model §7).
// Every 5 s (Sidekiq 6) or 10 s (7/8), in two MULTIs on its own connection:
//   stat:processed/failed (+ daily keys, 5-year TTL) += counts since the last beat;
//   <identity>:workers (6.x; 7+: :work, and 6 mode writes both) = running jobs, TTL 60 s;
//   SADD processes; HSET <identity> info/busy/beat/quiet/rss/rtt_us (8: concurrency), TTL 60 s;
//   RPOP <identity>-signals (remote TSTP/TERM/TTIN).
// On a Redis error the counts are kept for the next beat. clear() leaves "processes" and
// deletes the busy hash at shutdown. Runs on the launcher's io thread only.
#include <optional>
#include <string>

#include "kiqd/process_identity.hpp"
#include "kiqd/runtime.hpp"

namespace kiqd {

class Heartbeat {
  public:
    Heartbeat(Runtime& rt, const ProcessIdentity& me, std::string info_json);

    // One beat. Returns the remote signal popped from <identity>-signals, if any.
    std::optional<std::string> beat();
    // Flushes the counters (retrying a few times) and removes this process from "processes".
    void clear();
    std::chrono::seconds period() const;
    // Writes quiet=true at once, so the Web UI shows a quieted process without waiting a beat.
    void publish_quiet();

  private:
    void flush_and_publish_work(long long processed, long long failed);

    Runtime& rt_;
    const ProcessIdentity& me_;
    std::string info_json_;
    redis::Connection conn_;
};

}  // namespace kiqd
