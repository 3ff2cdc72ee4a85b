#pragma once
// LockSurvey: every unique lock in Redis and whether its holder is still there — kiqd's run
// locks (the held hash, kiqd:unique:held: holder = the owning process, alive while it shows a
// sign of life, LockKeeper::identities_alive) and the gem's client locks (uniquejobs:digests and
// uniquejobs:expiring_digests: holder = the jids in <digest>:LOCKED, alive while the jid is in
// a queue, the schedule or retry set, a process's busy hash, a reliable-fetch working list or a
// paused worker's parked set — what the gem's orphan reaper checks, plus kiqd's own places).
// A lock whose holder is gone is stale. Read by `kiqd unique locks` and by the LockKeeper's
// reaper, each on its own connection; stateless.
//
// Finding a jid reads the containers in pages of 500 (LRANGE / ZRANGE / HSCAN) so no single
// command blocks Redis on a long queue; the survey costs about (jobs queued / 500) round trips.
#include <optional>
#include <string>
#include <vector>

#include "kiqd/config.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd {

struct SurveyedLock {
    std::string kind;             // "run" (kiqd's EXEC lock) or "client" (the gem's client lock)
    std::string digest;           // e.g. uniquejobs:51379b77…
    std::string key;              // the key that holds it (<digest>:EXEC, <digest>:LOCKED)
    std::string holder;           // the owning process identity (run) or the jid (client)
    std::optional<double> since;  // epoch seconds it was taken, when known
    bool alive = false;
};

// Every lock, run locks first, each digest's client holders in jid order.
std::vector<SurveyedLock> survey_unique_locks(redis::Connection& conn, const Keys& keys);

// Frees one holder's share of a client lock (the reaper, for a holder found stale): `jid` leaves
// <digest>:LOCKED; with the last holder the lock's keys go and the digest leaves both ZSETs.
// Returns 1 when jid held it.
long long free_client_holder(redis::Connection& conn, const Keys& keys, const std::string& digest,
                             const std::string& jid);

// The commands that delete the gem's client lock of `digest` (its keys, the :RUN lock's keys and
// its entries in both digest ZSETs), as the gem's delete_by_digest does. One list for both who
// free a client lock whole: `kiqd unique unlock` (free_unique_digest) and the death handler.
std::vector<redis::Command> client_lock_delete_commands(const Keys& keys,
                                                        const std::string& digest);

// Frees every lock of `digest`: the gem's client lock (as its delete_by_digest does, with
// <digest>:INFO and the expiring-digests entry) and kiqd's run locks (EXEC, WAIT, the held-hash
// entry). Returns how many keys and entries it removed (0: there was no lock).
long long free_unique_digest(redis::Connection& conn, const Keys& keys, const std::string& digest);

}  // namespace kiqd
