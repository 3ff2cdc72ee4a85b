#include "middleware/limits/concurrency_limit.hpp"

#include <algorithm>

#include "fetch/refill_acquirer.hpp"
#include "middleware/limits/concurrency_scripts.hpp"
#include "middleware/limits/limit_scope.hpp"
#include "redis/script_fold.hpp"

namespace kiqd {
bool ConcurrencyLimitMiddleware::configured(const Config& config) {
    return std::any_of(config.classes.begin(), config.classes.end(),
                       [](const auto& kv) { return kv.second.concurrency_limit.has_value(); });
}

ConcurrencyLimitMiddleware::ConcurrencyLimitMiddleware(const Config& config, const Keys& keys,
                                                       SlotKeeper& keeper, std::string identity)
    : config_(config),
      keys_(keys),
      keeper_(keeper),
      identity_(std::move(identity)),
      acquire_script_(concurrency_acquire_script()),
      release_script_(concurrency_release_script()) {
    for (const auto& [name, cls] : config.classes)
        if (cls.concurrency_limit) classes_.emplace(name, &cls);
}

void ConcurrencyLimitMiddleware::call(JobContext& ctx, const Next& next) const {
    auto it = classes_.find(ctx.job.handler_name());
    if (it == classes_.end()) return next();
    const ClassSpec& cls = *it->second;
    const ConcurrencySpec& spec = *cls.concurrency_limit;
    const std::string scope = limit_scope(ctx.job, spec.by, -1, cls.fair_tenant_arg);
    const std::string slots = keys_.concurrency_slots(scope);
    const std::string waiting = keys_.concurrency_waiting(scope);
    const std::string limit = std::to_string(spec.limit);
    const std::string ttl = std::to_string(keeper_.config().slot_ttl.count());
    // A batched refill may have taken the slot already (refill_acquirer.hpp): no round trip.
    Acquired* pre = ctx.acquired ? ctx.acquired->claim(Acquired::Kind::slot, slots) : nullptr;
    const std::string member = pre ? pre->member : concurrency_slot_member(identity_, ctx.job.jid);
    uint64_t held = 0;
    if (pre) {
        held = pre->held;
    } else {
        std::vector<std::string> keys{slots, waiting, keys_.concurrency_scopes()};
        if (ctx.working_list) keys.push_back(*ctx.working_list);
        std::vector<std::string> args{limit,       member, ttl,           ctx.job.jid,
                                      ctx.job.raw, scope,  keys_.prefix()};
        // The previous job's releases (after_job) go out in the same write; the last, when it
        // is a slot's, inside this very script call.
        if (auto r = redis::take_deferred_call(ctx.after_job, release_script_, 2, 4)) {
            keys.insert(keys.end(), {(*r)[3], (*r)[4]});
            args.insert(args.end(), {"r", (*r)[5], (*r)[6], (*r)[7], (*r)[8]});
        }
        auto reply = acquire_script_.run_after(ctx.redis, ctx.after_job, keys, args);
        if (reply.integer() == 0) {
            ctx.working_list = nullptr;  // it left the working list (JobContext::working_list)
            ctx.log.debug("class={} jid={} waits for a slot ({} running in {})",
                          ctx.job.display_class(), ctx.job.jid, spec.limit, scope);
            return;  // parked in Redis: neither processed nor failed
        }
        held = keeper_.hold(slots, member);
    }
    // A slot taken with room to spare may be freed with the next refill (no round trip of its
    // own); one near the limit is freed with this thread's next write, as before.
    std::vector<redis::Command>* channel =
        pre && pre->roomy && ctx.after_refill ? ctx.after_refill : ctx.after_job;
    auto release = [&] {
        keeper_.release(held);
        if (channel) {  // sent with the outcome or the next fetch: one round trip less
            // Built in place and moved into the command: each string is copied once.
            std::vector<std::string> keys(2);
            keys[0] = slots;
            keys[1] = waiting;
            std::vector<std::string> args(4);
            args[0] = member;
            args[1] = limit;
            args[2] = ttl;
            args[3] = keys_.prefix();
            channel->push_back(
                release_script_.deferred_command(ctx.redis, std::move(keys), std::move(args)));
            return;
        }
        try {
            release_script_.run(ctx.redis, {slots, waiting}, {member, limit, ttl, keys_.prefix()});
        } catch (const redis::Error& e) {
            // The slot expires within slot_ttl (no longer extended); the check moves the
            // parked jobs back then.
            ctx.log.warn("jid={} could not release its slot in {}: {}", ctx.job.jid, slots,
                         e.what());
        }
    };
    try {
        next();
    } catch (...) {
        release();
        throw;
    }
    release();
}

}  // namespace kiqd
