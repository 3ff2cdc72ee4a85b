#pragma once
// Throttle: a server middleware that enforces `handlers: {C: {throttle: {limit: L, period: P,
// by: class | tenant | "arg:N"}}}` with Rack::Attack's fixed-window counter
// (docs/data-model.md#throttle-keys). Windows are aligned to multiples of P seconds since the
// epoch; the counter of window n = floor(now / P) is `kiqd:throttle:<n>:<scope>` (limit_scope.hpp),
// incremented with INCRBY and given EXPIRE (P − now mod P + 1) in one pipeline (one round
// trip). A job whose increment returns more than L is not run: it goes to `schedule` at the
// start of the next window plus a jitter of up to a tenth of the period (at most 5 s), so the
// throttled jobs of a window do not all come back at the same instant. It then counts as
// neither processed nor failed, and it keeps its payload unchanged (jid, retry state); with
// reliable fetch it leaves the working list in the same transaction (MULTI) as the ZADD.
// Like Rack::Attack, a throttled attempt still counts in its window.
//
// The resolution is the scheduler's: a rescheduled job comes back within one poll interval
// (`average_scheduled_poll_interval`) after its time.
//
// Tokens in advance: a window's counter is incremented by more than one when this process keeps
// running jobs of one scope, and the jobs past the first run on the tokens left over without a
// round trip. The first increment of a scope in a window takes 1 token; each next one takes
// twice the last, up to throttle_chunk(limit) (limit / 100, 1..1024; 1 for a limit under 200: such
// a throttle behaves exactly as one token per job). An increment that returns count c for k
// tokens grants min(k, L - (c - k)) of them: the jobs run never exceed L per window, across all
// processes. What a process took and did not use when its window ends is lost (at most
// chunk - 1 per scope per process, about 1 % of L), and the counter can run ahead of the jobs
// started by as much; tokens only serve the window they were taken in.
//
// Built only when some class configures a throttle; other classes pay one hash lookup.
// One instance is shared by all processor threads; the tokens in hand are guarded by a mutex.
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "kiqd/config.hpp"
#include "kiqd/middleware_chain.hpp"

namespace kiqd {

// The window that contains `now` (whole epoch seconds) for a period of `period` seconds.
struct ThrottleWindow {
    long long number;      // floor(now / period)
    long long ttl;         // seconds the counter lives: period − now mod period + 1
    long long next_start;  // epoch seconds at which the next window begins
};
ThrottleWindow throttle_window(long long now, long long period);
// The most tokens one increment takes for a limit of `limit` (see above).
long long throttle_chunk(long long limit);

class ThrottleMiddleware final : public ServerMiddleware {
  public:
    ThrottleMiddleware(const Config& config, const Keys& keys);
    std::string_view name() const override { return "throttle"; }
    void call(JobContext& ctx, const Next& next) const override;

    // True when some class in `config` has a throttle (only then is the middleware built).
    static bool configured(const Config& config);

  private:
    const Keys& keys_;
    // The classes with a throttle, by name: their spec and `fair_tenant: {arg: N}` (where
    // `by: tenant` finds a tenant the payload does not name). The Config outlives the chain.
    std::unordered_map<std::string, const ClassSpec*> classes_;
    // Tokens taken and not used yet, by counter key (window and scope). `chunk`: the tokens the
    // last increment of that key asked for.
    struct Tokens {
        long long window = 0;
        long long left = 0;
        long long chunk = 0;
    };
    // Takes a token of `key` in hand (true), or false when there is none.
    bool take_token(const std::string& key) const;
    // After an increment of `key` by `asked` that returned `count`: the tokens granted.
    long long grant(const std::string& key, long long window, long long asked, long long count,
                    long long limit) const;
    long long next_chunk(const std::string& key, long long limit) const;
    mutable std::mutex mutex_;
    mutable std::unordered_map<std::string, Tokens> tokens_;  // guarded by mutex_
};

}  // namespace kiqd
