#include "job/job_retry.hpp"

#include <algorithm>
#include <limits>

#include "job/backtrace_codec.hpp"
#include "job/raw_json_object.hpp"
#include "kiqd/clock.hpp"

namespace kiqd {

std::string truncate_utf8(const std::string& text, size_t max_chars) {
    size_t chars = 0;
    for (size_t i = 0; i < text.size(); ++i) {
        if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {  // a code point starts here
            if (chars == max_chars) return text.substr(0, i);
            ++chars;
        }
    }
    return text;
}

namespace {

// Sidekiq 6/7's jitter, rand(10) * (count + 1), with count clamped as delay_seconds clamps it.
long long count_jitter(long long count, std::mt19937_64& rng) {
    std::uniform_int_distribution<long long> r(0, 9);
    return r(rng) * (std::clamp(count, 0LL, 50000LL) + 1);
}

// The retry_count this failure gets: the payload's plus one, saturating (a payload may carry
// any retry_count, even the largest long long); 0 for a first failure.
long long next_retry_count(const Job& job) {
    const auto previous = job.retry_count();
    if (!previous) return 0;
    return *previous < std::numeric_limits<long long>::max() ? *previous + 1 : *previous;
}

}  // namespace

long long JobRetry::delay_seconds(long long count, Compat compat, std::mt19937_64& rng) {
    // retry_count comes from the payload: clamp it so that count⁴ cannot overflow (50,000⁴ s is
    // 2·10¹¹ years, "never" either way) and a negative count cannot invert the jitter range.
    count = std::clamp(count, 0LL, 50000LL);
    const long long base = count * count * count * count + 15;
    if (compat == Compat::v8) {
        std::uniform_int_distribution<long long> jitter(0, 10 * (count + 1) - 1);
        return base + jitter(rng);
    }
    return base + count_jitter(count, rng);
}

namespace {

// Whether the failure numbered `count` (0 = first) ends the retries: `max` of them, or, with
// Sidekiq 7.1+'s retry_for, the time since the first failure.
bool retries_exhausted(const nlohmann::json& p, long long count, long long max, double now,
                       Compat compat) {
    const bool counted_out = count >= max;
    if (auto rf = p.find("retry_for"); rf != p.end() && rf->is_number()) {
        // retry_for: retried until failed_at + retry_for. Sidekiq 7 also stops at the retry
        // count; 8 checks the duration alone, whatever the count (job_retry.rb).
        double first = now;
        if (auto fa = p.find("failed_at"); fa != p.end() && fa->is_number())
            first = timestamp_seconds(fa->get<double>(), fa->is_number_integer());
        const bool expired = first + rf->get<double>() < now;
        return compat == Compat::v8 ? expired : counted_out || expired;
    }
    return counted_out;
}

// Ruby truthiness of "retry": absent means the default (true); false and null disable retries.
bool retry_enabled(const nlohmann::json& p) {
    auto it = p.find("retry");
    return it == p.end() || !(it->is_null() || (it->is_boolean() && !*it));
}

long long max_retries_of(const nlohmann::json& p, long long fallback) {
    auto it = p.find("retry");
    return it != p.end() && it->is_number_integer() ? it->get<long long>() : fallback;
}

}  // namespace

FailureOutcome JobRetry::fate(const Job& job, double now) const {
    const nlohmann::json p = job.members({"retry", "retry_for", "failed_at"});
    if (!retry_enabled(p)) return FailureOutcome::Discarded;
    return retries_exhausted(p, next_retry_count(job), max_retries_of(p, max_retries()), now,
                             compat_)
               ? FailureOutcome::Dead
               : FailureOutcome::Retried;
}

RetryPlan JobRetry::plan(const Job& job, const Failure& failure, double now,
                         std::mt19937_64& rng) const {
    RetryPlan plan;
    // The original, not anything middleware changed. parse_job only makes Jobs whose payload
    // this reads (both go through the same strict check); if it cannot — a Job built by hand, or
    // a bug — nothing can be edited, and the original goes to the dead set whole with the
    // reason, never a retry entry rebuilt around a fragment of it. Checked before the members
    // are read, which would throw on such a text.
    std::string unreadable;
    auto obj = RawJsonObject::parse(job.raw, &unreadable);
    if (!obj) {
        plan.outcome = FailureOutcome::Dead;
        plan.score = now;
        plan.payload = dead_.invalid_entry(
            job.raw, job.queue,
            {"Kiqd::InvalidJob",
             truncate_utf8("the job failed (" + failure.error_class + ": " + failure.message +
                               ") and its payload cannot be edited for a retry: " + unreadable,
                           10000)});
        return plan;
    }
    // Only the members the plan reads, each parsed on its own: the failed job's tree could cost
    // many times its size (docs/hardening-bounds.md), and the entry is edited as text.
    const nlohmann::json p =
        job.members({"retry", "retry_queue", "backtrace", "retry_for", "failed_at", "dead"});
    using Decision = Failure::Decision;
    if (failure.decision == Decision::discard) return plan;  // the runner's Sidekiq wrote nothing
    const bool decided = failure.decision != Decision::none;
    if (!decided && !retry_enabled(p)) {
        // No retry, no morgue; Sidekiq still calls its death handlers (JobRetry#global), with
        // the job as it was: a runner's exhausted hook does.
        plan.exhausted = true;
        plan.payload = job.raw;
        return plan;
    }
    if (failure.give_up == Failure::GiveUp::discard) return plan;  // Sidekiq 7's :discard: poof
    const long long max = max_retries_of(p, max_retries());

    auto retry_queue = p.find("retry_queue");
    obj->set_string("queue", retry_queue != p.end() && retry_queue->is_string()
                                 ? retry_queue->get<std::string>()
                                 : job.queue);
    obj->set_string("error_message", truncate_utf8(failure.message, 10000));
    obj->set_string("error_class", failure.error_class);
    const long long count = next_retry_count(job);
    obj->set(job.retry_count() ? "retried_at" : "failed_at", payload_timestamp(compat_, now));
    obj->set("retry_count", std::to_string(count));
    if (auto bt = p.find("backtrace");
        bt != p.end() && !bt->is_null() && !(bt->is_boolean() && !*bt)) {
        std::vector<std::string> lines = failure.backtrace;
        if (bt->is_number_integer() && bt->get<long long>() >= 0 &&
            lines.size() > static_cast<size_t>(bt->get<long long>()))
            lines.resize(static_cast<size_t>(bt->get<long long>()));
        obj->set_string("error_backtrace", encode_backtrace(lines));
    }

    const bool exhausted = decided ? failure.decision == Decision::dead
                                   : failure.give_up == Failure::GiveUp::kill ||
                                         retries_exhausted(p, count, max, now, compat_);
    plan.payload = obj->dump();
    if (exhausted) {
        auto dead = p.find("dead");
        plan.outcome = dead != p.end() && dead->is_boolean() && !*dead ? FailureOutcome::Discarded
                                                                       : FailureOutcome::Dead;
        plan.score = now;
        plan.exhausted = !decided;  // a deciding runner ran Sidekiq's exhausted hooks itself
    } else if (decided) {
        // When the runner's Sidekiq would have scheduled it: its own delay and jitter.
        plan.outcome = FailureOutcome::Retried;
        plan.score = failure.retry_at;
    } else {
        plan.outcome = FailureOutcome::Retried;
        // With the job's own delay (sidekiq_retry_in), Sidekiq 6.4.1's delay_for: that delay
        // plus rand(10) * (count + 1); otherwise the version's own formula.
        const long long delay =
            failure.retry_in && *failure.retry_in > 0
                ? std::min(*failure.retry_in, 366LL * 24 * 3600) + count_jitter(count, rng)
                : delay_seconds(count, compat_, rng);
        plan.score = now + static_cast<double>(delay);
    }
    return plan;
}

std::vector<redis::Command> JobRetry::commands(const RetryPlan& plan) const {
    switch (plan.outcome) {
        case FailureOutcome::Retried:
            return {{"ZADD", keys_.retry(), score_text(plan.score), plan.payload}};
        case FailureOutcome::Dead:
            return dead_.entry_commands(plan.payload, plan.score);
        case FailureOutcome::Discarded:
            break;
    }
    return {};
}

}  // namespace kiqd
