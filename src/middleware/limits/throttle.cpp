#include "middleware/limits/throttle.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "common/outcome_counters.hpp"
#include "kiqd/clock.hpp"
#include "middleware/limits/limit_scope.hpp"
#include "redis/transaction.hpp"

namespace kiqd {
namespace {

// Up to a tenth of the period, at most 5 s: enough to spread a window's throttled jobs over
// the scheduler's polls without pushing them far into the window they are waiting for.
double jitter_seconds(long long period) {
    thread_local std::mt19937_64 rng(std::random_device{}());
    const double max = std::min(5.0, static_cast<double>(period) / 10.0);
    return std::uniform_real_distribution<double>(0.0, max)(rng);
}

// Entries of past windows are dropped once the map holds this many (scopes by tenant or by
// argument can be many).
constexpr size_t kMaxTokenEntries = 1024;

}  // namespace

long long throttle_chunk(long long limit) {
    // 1 % of the limit bounds what a process can take and not use; the cap bounds it in
    // tokens. At 64 a thread ran out every 64 jobs and made its round trip in the middle of
    // its pile, while its finished jobs' acknowledgements waited (batched fetch: the working
    // list grew from 200 to up to 600 entries and each LREM scanned twice as far).
    return std::clamp(limit / 100, 1LL, 1024LL);
}

bool ThrottleMiddleware::take_token(const std::string& key) const {
    std::lock_guard lock(mutex_);
    auto it = tokens_.find(key);
    if (it == tokens_.end() || it->second.left <= 0) return false;
    --it->second.left;
    return true;
}

long long ThrottleMiddleware::next_chunk(const std::string& key, long long limit) const {
    const long long cap = throttle_chunk(limit);
    if (cap <= 1) return 1;
    std::lock_guard lock(mutex_);
    auto it = tokens_.find(key);
    return it == tokens_.end() ? 1 : std::min(cap, std::max(1LL, it->second.chunk * 2));
}

long long ThrottleMiddleware::grant(const std::string& key, long long window, long long asked,
                                    long long count, long long limit) const {
    const long long granted = std::clamp(limit - (count - asked), 0LL, asked);
    if (throttle_chunk(limit) <= 1) return granted;  // one token per job: nothing kept
    std::lock_guard lock(mutex_);
    if (tokens_.size() >= kMaxTokenEntries && !tokens_.count(key)) {
        for (auto it = tokens_.begin(); it != tokens_.end();)
            it = it->second.window < window ? tokens_.erase(it) : std::next(it);
        if (tokens_.size() >= kMaxTokenEntries) tokens_.erase(tokens_.begin());
    }
    auto& t = tokens_[key];
    t.window = window;
    // Short of tokens: the window is (nearly) used up, and its throttled attempts count one each.
    t.chunk = granted < asked ? 0 : asked;
    if (granted > 1) t.left += granted - 1;  // the caller's job uses the first
    return granted;
}

ThrottleWindow throttle_window(long long now, long long period) {
    const long long number = now / period;  // now ≥ 0: the epoch is behind us
    return {number, period - now % period + 1, (number + 1) * period};
}

bool ThrottleMiddleware::configured(const Config& config) {
    return std::any_of(config.classes.begin(), config.classes.end(),
                       [](const auto& kv) { return kv.second.throttle.has_value(); });
}

ThrottleMiddleware::ThrottleMiddleware(const Config& config, const Keys& keys) : keys_(keys) {
    for (const auto& [name, cls] : config.classes)
        if (cls.throttle) classes_.emplace(name, &cls);
}

void ThrottleMiddleware::call(JobContext& ctx, const Next& next) const {
    auto it = classes_.find(ctx.job.handler_name());
    if (it == classes_.end()) return next();
    const ClassSpec& cls = *it->second;
    const ThrottleSpec& spec = *cls.throttle;
    const auto now = static_cast<long long>(std::floor(epoch_seconds()));
    const ThrottleWindow w = throttle_window(now, spec.period);
    const std::string key =
        keys_.throttle(w.number, limit_scope(ctx.job, spec.by, spec.arg, cls.fair_tenant_arg));
    // A token taken earlier in this window: no round trip (the processor sends the previous
    // job's releases itself).
    if (take_token(key)) return next();
    const long long asked = next_chunk(key, spec.limit);
    // The previous job's lock releases (after_job) go out in the same write, unchecked.
    std::vector<redis::Command> cmds;
    if (ctx.after_job) cmds = *ctx.after_job;
    const size_t first = cmds.size();
    cmds.push_back({"INCRBY", key, std::to_string(asked)});
    cmds.push_back({"EXPIRE", key, std::to_string(w.ttl)});
    auto replies = ctx.redis.pipeline_unchecked(cmds);
    if (ctx.after_job) ctx.after_job->clear();
    for (size_t i = first; i < replies.size(); ++i)
        if (replies[i].is_error()) throw redis::ReplyError(std::string(replies[i].error_text()));
    const long long count = replies[first].integer();
    if (grant(key, w.number, asked, count, spec.limit) > 0) return next();
    const double at = static_cast<double>(w.next_start) + jitter_seconds(spec.period);
    // Stored before returning (the processor then records neither success nor failure), and
    // with reliable fetch taken out of the working list in the same transaction.
    redis::Command zadd{"ZADD", keys_.schedule(), score_text(at), ctx.job.raw};
    if (ctx.working_list)
        ctx.redis.pipeline(redis::in_transaction_if_removed(
            {"LREM", *ctx.working_list, "1", ctx.job.raw}, {zadd}));
    else
        ctx.redis.command(zadd);
    ctx.working_list = nullptr;  // it left the working list (JobContext::working_list)
    increment(outcome_counters().throttled);
    ctx.log.debug("class={} jid={} throttled ({} > {} in {} s window {}): rescheduled at {:.3f}",
                  ctx.job.display_class(), ctx.job.jid, count, spec.limit, spec.period, w.number,
                  at);
}

}  // namespace kiqd
