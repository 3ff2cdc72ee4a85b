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
// Built only when some class configures a throttle; other classes pay one hash lookup.
// One instance is shared by all processor threads; it holds no per-job state.
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
};

}  // namespace kiqd
