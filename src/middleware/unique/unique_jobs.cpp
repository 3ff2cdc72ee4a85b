#include "middleware/unique/unique_jobs.hpp"

#include <openssl/evp.h>

#include <cmath>
#include <string_view>

#include "common/outcome_counters.hpp"
#include "common/random_hex.hpp"
#include "fetch/refill_acquirer.hpp"
#include "job/raw_json_object.hpp"
#include "kiqd/clock.hpp"
#include "middleware/unique/lock_survey.hpp"
#include "middleware/unique/ruby_json.hpp"
#include "middleware/unique/unique_scripts.hpp"
#include "redis/script_fold.hpp"

namespace kiqd {
namespace {

constexpr auto kWaitLockTtl = std::chrono::seconds(60);
constexpr double kRescheduleSeconds = 5.0;  // the gem's default schedule_in

// With on_conflict: reschedule, the copy of an until_and_while_executing job that waits for the
// run lock holds the gem's client lock while it waits (the gem's rescheduled copy takes it when
// it is pushed), so the gem's client rejects the pushes made meanwhile.
bool holds_client_lock_while_waiting(const LockSpec& lock) {
    return lock.client_lock && lock.type == kUntilAndWhile && lock.on_conflict == "reschedule";
}

[[noreturn]] void invalid(const std::string& message) {
    throw JobError("Kiqd::InvalidLock", message);
}

std::optional<std::chrono::milliseconds> seconds_field(const nlohmann::json& p, const char* key) {
    auto it = p.find(key);
    if (it == p.end() || it->is_null()) return std::nullopt;
    if (!it->is_number()) invalid(std::string(key) + " must be a number of seconds");
    const double seconds = it->get<double>();
    if (!std::isfinite(seconds) || std::abs(seconds) > 1e10)
        invalid(std::string(key) + " is out of range");
    return std::chrono::milliseconds(static_cast<long long>(seconds * 1000.0));
}

// The identity arguments as Ruby's JSON.generate writes them (ruby_json.hpp), from the
// payload's own text: in the producer's key order (Ruby hashes keep insertion order), every
// digit of an integer kept, floats as Ruby prints them. Only the member the lock is on is read:
// a lock on args reads args, one on the job's own lock_args or on picked arguments never reads
// the rest.
std::string lock_args_of(const Job& job, const ClassSpec* defaults, JsonFloats floats) {
    auto rewritten = [&](std::optional<std::string_view> text) {
        return text ? ruby_json(*text, floats) : std::string("[]");
    };
    if (auto own = job.member_json("lock_args")) return rewritten(own);
    if (!defaults || !defaults->lock.lock_args) return rewritten(job.member_json("args"));
    std::string picked = "[";
    for (int i : *defaults->lock.lock_args) {
        if (picked.size() > 1) picked += ',';
        auto arg = i >= 0 ? job.arg_json(static_cast<size_t>(i)) : std::nullopt;
        picked += arg ? ruby_json(*arg, floats) : "null";
    }
    return picked + "]";
}

}  // namespace

std::string unique_digest(const std::string& prefix, const std::string* job_class,
                          const std::string* queue, const std::string& lock_args,
                          const std::optional<std::string>& apartment, bool modern) {
    // JSON.generate of the sorted [key, value] pairs: apartment < class < lock_args < queue.
    // Appended piece by piece into one reserved buffer (temporaries were a third of its cost).
    const std::string cls = job_class ? ruby_json_string(*job_class) : std::string();
    const std::string que = queue ? ruby_json_string(*queue) : std::string();
    std::string text;
    text.reserve(48 + (apartment ? apartment->size() : 0) + cls.size() + lock_args.size() +
                 que.size());
    auto pair = [&text](std::string_view head, const std::string& value, std::string_view tail) {
        text += head;
        text += value;
        text += tail;
    };
    text += '[';
    if (apartment) pair("[\"apartment\",", *apartment, "],");
    if (job_class) pair("[\"class\",", cls, "],");
    pair("[\"lock_args\",", lock_args, "]");
    if (queue) pair(",[\"queue\",", que, "]");
    text += ']';
    // OpenSSL 3 looks EVP_md5() up in its provider on every use; fetch them once.
    static EVP_MD* const md5 = EVP_MD_fetch(nullptr, "MD5", nullptr);
    static EVP_MD* const sha3 = EVP_MD_fetch(nullptr, "SHA3-256", nullptr);
    // One context per thread, reused: EVP_Digest allocates and frees one per call, which cost
    // more than the hash of these few dozen bytes.
    struct Ctx {
        EVP_MD_CTX* ctx = EVP_MD_CTX_new();
        ~Ctx() { EVP_MD_CTX_free(ctx); }
    };
    thread_local Ctx reused;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (!reused.ctx || !EVP_DigestInit_ex(reused.ctx, modern ? sha3 : md5, nullptr) ||
        !EVP_DigestUpdate(reused.ctx, text.data(), text.size()) ||
        !EVP_DigestFinal_ex(reused.ctx, md, &len))
        EVP_Digest(text.data(), text.size(), md, &len, modern ? sha3 : md5, nullptr);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    out.reserve(prefix.size() + 1 + 2 * len);
    out += prefix;
    out += ':';
    for (unsigned int i = 0; i < len; ++i) {
        out += kHex[md[i] >> 4];
        out += kHex[md[i] & 15];
    }
    return out;
}

std::optional<LockSpec> resolve_lock(const Job& job, const ClassSpec* defaults,
                                     const UniqueJobsConfig& config) {
    LockSpec s;
    // Whether the job uses a lock at all, from its `lock` member alone: the middleware is in
    // every chain, and a payload's tree costs many times its size
    // (docs/hardening-bounds.md#payload-memory).
    if (auto lock = job.member("lock"); lock && !lock->is_null()) {
        if (!lock->is_string()) invalid("lock must be a string");
        s.type = canonical_lock_type(lock->get<std::string>());
        if (s.type.empty()) invalid("unknown lock type '" + lock->get<std::string>() + "'");
    } else if (defaults && !defaults->lock.lock.empty()) {
        s.type = defaults->lock.lock;
    } else {
        return std::nullopt;
    }
    const LockDefaults* d = defaults ? &defaults->lock : nullptr;
    // The lock's options, each parsed on its own; the identity arguments are read last.
    const nlohmann::json p =
        job.members({"lock_ttl", "lock_expiration", "lock_timeout", "on_conflict", "lock_digest",
                     "lock_prefix", "unique_across_queues", "unique_across_workers", "lock_limit",
                     "at", "lock_wait_token", "lock_wait_since"});
    if (auto it = p.find("lock_wait_token"); it != p.end()) s.wait_token = *it;
    if (auto it = p.find("lock_wait_since"); it != p.end()) s.wait_since = *it;

    auto ttl = seconds_field(p, "lock_ttl");
    if (!ttl) ttl = seconds_field(p, "lock_expiration");  // the gem's legacy name
    // The gem's client lock carries the payload's own TTL (the gem reads lock_ttl.to_i: null and
    // 0 mean none); the EXEC lock, kiqd's, always has one.
    if (ttl && ttl->count() >= 1000) s.client_pttl = ttl->count() / 1000 * 1000;
    if (auto it = p.find("lock_limit"); it != p.end() && it->is_number())
        s.limit = std::max(1LL, static_cast<long long>(it->get<double>()));
    if (auto it = p.find("at"); it != p.end() && it->is_number())
        s.score = score_text(it->get<double>());
    if (!ttl || ttl->count() < 1000) ttl = d && d->lock_ttl ? d->lock_ttl : std::nullopt;
    s.ttl = ttl ? *ttl : config.default_lock_ttl;

    if (p.contains("lock_timeout")) {
        s.timeout = seconds_field(p, "lock_timeout");  // null: wait as long as it takes
    } else if (d && d->lock_timeout) {
        s.timeout = d->lock_timeout;
    } else if (s.type == kWhileExecuting) {
        s.timeout = std::chrono::milliseconds(0);  // the gem's default: do not wait
    }
    // until_and_while_executing: the copy that waits is the run that follows the running one,
    // so it waits however long that run takes unless a positive lock_timeout says otherwise.
    // The gem's client writes lock_timeout: 0 into every payload; its server then waits ~1 s and
    // drops the copy, which loses the update the copy was pushed for.
    if (s.type == kUntilAndWhile && s.timeout && s.timeout->count() <= 0) s.timeout.reset();

    std::string on_conflict;
    if (auto it = p.find("on_conflict"); it != p.end() && !it->is_null()) {
        const auto& v = it->is_object() && it->contains("server") ? (*it)["server"] : *it;
        if (!v.is_string()) invalid("on_conflict must be a string or {\"server\": ...}");
        on_conflict = v.get<std::string>();
    } else if (d && !d->on_conflict.empty()) {
        on_conflict = d->on_conflict;
    }
    if (on_conflict == "raise") on_conflict = "reject";  // an error the operator can see
    if (on_conflict != "reject" && on_conflict != "reschedule" && on_conflict != "log") {
        if (!on_conflict.empty() && on_conflict != "replace")
            invalid("unknown on_conflict '" + on_conflict + "'");
        // A dropped duplicate of until_and_while_executing loses nothing (the waiting copy
        // runs later); for while_executing it would, so its duplicates go to the dead set.
        on_conflict = s.type == kUntilAndWhile ? "log" : "reject";
    }
    s.on_conflict = on_conflict;

    if (auto it = p.find("lock_digest");
        it != p.end() && it->is_string() && !it->get<std::string>().empty()) {
        s.digest = it->get<std::string>();
        s.client_lock = true;
    } else {
        std::string prefix = "uniquejobs";
        if (auto pit = p.find("lock_prefix"); pit != p.end() && pit->is_string())
            prefix = pit->get<std::string>();
        const bool across_queues = p.value("unique_across_queues", false);
        const bool across_workers = p.value("unique_across_workers", false);
        try {
            // The gem's digest has held `apartment` (sidekiq-apartment's tenant) since 7.0.
            std::optional<std::string> apartment;
            const JsonFloats floats =
                config.json_2_15_floats ? JsonFloats::json_2_15 : JsonFloats::float_to_s;
            if (auto a = job.member_json("apartment")) apartment = ruby_json(*a, floats);
            s.digest =
                unique_digest(prefix, across_workers ? nullptr : &job.job_class,
                              across_queues ? nullptr : &job.queue,
                              lock_args_of(job, defaults, floats), apartment, config.modern_digest);
        } catch (const std::invalid_argument& e) {
            invalid(std::string("the lock's arguments cannot be digested as Ruby does: ") +
                    e.what());
        }
    }
    return s;
}

UniqueJobsMiddleware::UniqueJobsMiddleware(const Config& config, const Keys& keys,
                                           const DeadSet& dead, const JobRetry& retry,
                                           LockKeeper& keeper, std::string identity)
    : config_(config),
      keys_(keys),
      dead_(dead),
      retry_(retry),
      keeper_(keeper),
      identity_(std::move(identity)),
      acquire_script_(unique_scripts::kAcquire),
      acquire_releasing_client_script_(unique_scripts::kAcquireReleasingClientLock),
      client_unlock_script_(unique_scripts::kClientUnlock),
      client_lock_script_(unique_scripts::kClientLock),
      release_script_(LockKeeper::release_script_source()),
      drop_wait_script_(unique_scripts::kDropWait),
      schedule_holding_script_(unique_scripts::kScheduleHolding) {}

std::vector<std::string> client_lock_keys(const Keys& keys, const std::string& digest) {
    return {keys.digest_key(digest),
            keys.digest_key(digest, ":LOCKED"),
            keys.digest_key(digest, ":QUEUED"),
            keys.digest_key(digest, ":PRIMED"),
            keys.digest_key(digest, ":INFO"),
            keys.digest_key("uniquejobs:digests"),
            keys.digest_key("uniquejobs:expiring_digests")};
}

std::vector<std::string> client_lock_take_args(const LockSpec& lock, const std::string& jid) {
    const std::string score = lock.score.empty() ? score_text(epoch_seconds()) : lock.score;
    return {jid,
            std::to_string(lock.client_pttl),
            lock.type == "until_expired" ? "1" : "0",
            std::to_string(lock.limit),
            score,
            lock.digest};
}

void UniqueJobsMiddleware::call(JobContext& ctx, const Next& next) const {
    // A batched refill that took the EXEC lock resolved the options already (same payload, same
    // configuration): resolving and digesting them again was most of this middleware's CPU. Its
    // LockSpec is used where it is (shared, never modified), not copied.
    const Acquired* pre = ctx.acquired ? ctx.acquired->find(Acquired::Kind::exec_lock) : nullptr;
    const std::shared_ptr<const LockSpec> shared = pre ? pre->lock : nullptr;
    std::optional<LockSpec> resolved;
    if (!shared) {
        auto cls = config_.classes.find(ctx.job.handler_name());
        resolved = resolve_lock(ctx.job, cls == config_.classes.end() ? nullptr : &cls->second,
                                config_.unique_jobs);
    }
    const LockSpec* lock = shared ? shared.get() : resolved ? &*resolved : nullptr;
    if (!lock) return next();
    // Runs the job; on a failure, does to the client lock what the gem's server does
    // (`relock`: take it again for the retry) before the failure goes on to the retry logic.
    auto run = [&](const Next& body, bool relock) {
        try {
            body();
        } catch (const Interrupted&) {
            after_failure(ctx, *lock, true, relock);
            throw;
        } catch (...) {
            after_failure(ctx, *lock, false, relock);
            throw;
        }
    };
    if (lock->type == kWhileExecuting) return run_with_exec_lock(ctx, next, *lock);
    if (lock->type == kUntilAndWhile) {
        // The gem's server releases the until-lock first, then tries for the run lock: with the
        // gem's client lock, the acquire script does both in one call.
        return run([&] { run_with_exec_lock(ctx, next, *lock); }, true);
    }
    if (lock->type == "until_executing") {
        release_client_lock(ctx, *lock);
        return run(next, true);
    }
    // until_executed, until_expired: the run needs the lock. A copy that does not hold it (its
    // lock expired, or it is a retry kiqd's scheduler moved without the gem's client middleware)
    // takes it; if another jid holds it, that copy runs later and this one is a duplicate.
    if (lock->client_lock && take_client_lock(ctx, *lock) == 0) return duplicate(ctx, *lock);
    run(next, false);  // a failed until_executed job keeps its lock through the retry (gem 8)
    if (lock->type == "until_executed") release_client_lock(ctx, *lock);
}

long long UniqueJobsMiddleware::release_client_lock(JobContext& ctx, const LockSpec& lock) const {
    if (!lock.client_lock || ctx.job.jid.empty()) return 0;
    return client_unlock_script_
        .run(ctx.redis, client_lock_keys(keys_, lock.digest), {ctx.job.jid, lock.digest})
        .integer();
}

long long UniqueJobsMiddleware::take_client_lock(JobContext& ctx, const LockSpec& lock) const {
    if (!lock.client_lock || ctx.job.jid.empty()) return 1;
    return client_lock_script_
        .run(ctx.redis, client_lock_keys(keys_, lock.digest),
             client_lock_take_args(lock, ctx.job.jid))
        .integer();
}

void UniqueJobsMiddleware::after_failure(JobContext& ctx, const LockSpec& lock, bool interrupted,
                                         bool relock) const {
    if (!lock.client_lock) return;
    try {
        const FailureOutcome fate =
            interrupted ? FailureOutcome::Retried : retry_.fate(ctx.job, epoch_seconds());
        if (fate == FailureOutcome::Dead) {
            // The gem's death handler: the identity is free again once its job is dead.
            ctx.redis.pipeline(client_lock_delete_commands(keys_, lock.digest));
        } else if (fate == FailureOutcome::Retried && relock) {
            // Duplicates pushed while it waits for its retry are rejected by the gem's client.
            // When another copy took the lock meanwhile, that copy runs later.
            take_client_lock(ctx, lock);
        } else if (fate == FailureOutcome::Discarded && !relock) {
            release_client_lock(ctx, lock);  // retry: false — nothing will run it again
        }
    } catch (const redis::Error& e) {
        ctx.log.warn("jid={} could not update the client lock {} after a failure: {}", ctx.job.jid,
                     lock.digest, e.what());
    }
}

void UniqueJobsMiddleware::duplicate(JobContext& ctx, const LockSpec& lock) const {
    ctx.log.warn(
        "class={} jid={} duplicate dropped: jid {} holds client lock {} and runs later",
        ctx.job.display_class(), ctx.job.jid,
        [&] {
            auto v = ctx.redis.command({"GET", keys_.digest_key(lock.digest)});
            return v.is_nil() ? std::string("?") : std::string(v.str());
        }(),
        lock.digest);
}

void UniqueJobsMiddleware::run_with_exec_lock(JobContext& ctx, const Next& next,
                                              const LockSpec& lock) const {
    const bool use_wait = lock.type == kUntilAndWhile;
    const std::string carried = lock.wait_token ? lock.wait_token->get<std::string>() : "";
    const double since = lock.wait_since ? lock.wait_since->get<double>() : 0.0;
    const std::string exec_key = keys_.digest_key(lock.digest, ":EXEC");
    // A batched refill may have taken the EXEC lock already (refill_acquirer.hpp): no round
    // trip. It takes it only where no copy waits and the lock was free, so the job just runs.
    Acquired* pre =
        ctx.acquired ? ctx.acquired->claim(Acquired::Kind::exec_lock, exec_key) : nullptr;
    const std::string owner = pre ? pre->member : LockKeeper::new_owner(identity_);
    uint64_t held = 0;
    if (pre) {
        held = pre->held;
    } else {
        const std::string wait_key = keys_.digest_key(lock.digest, ":WAIT");
        std::vector<std::string> keys{wait_key, exec_key, keeper_.held_hash()};
        std::vector<std::string> args{
            use_wait ? "1" : "0",
            carried,
            random_hex(16),
            owner,
            std::to_string(lock.ttl.count()),
            std::to_string(std::chrono::milliseconds(kWaitLockTtl).count())};
        // The gem's client lock (until_and_while_executing) is released in the same call, before
        // the run lock is tried, as the gem's server does; kept while the copy waits with
        // on_conflict reschedule.
        const bool releases_client = use_wait && lock.client_lock && !ctx.job.jid.empty();
        if (releases_client) {
            auto client = client_lock_keys(keys_, lock.digest);
            keys.insert(keys.end(), client.begin(), client.end() - 1);  // not expiring_digests
            args.insert(args.end(), {ctx.job.jid, lock.digest, lock.wait_token ? "0" : "1",
                                     holds_client_lock_while_waiting(lock) ? "1" : "0"});
        }
        // The previous job's lock releases (after_job) go out in the same write; the last, when it
        // is an EXEC lock's, inside this very script call.
        if (auto r = redis::take_deferred_call(ctx.after_job, release_script_, 2, 1)) {
            keys.insert(keys.end(), {(*r)[3], (*r)[4]});
            args.push_back((*r)[5]);
        }
        const redis::Script& acquire =
            releases_client ? acquire_releasing_client_script_ : acquire_script_;
        auto reply = acquire.run_after(ctx.redis, ctx.after_job, keys, args);
        const long long outcome = reply[0].integer();
        if (outcome == 3) return duplicate(ctx, lock);
        if (outcome == 0)
            return conflict(ctx, lock, "another copy is already waiting for lock " + lock.digest,
                            true);
        if (outcome == 2) {
            const std::string token = use_wait ? std::string(reply[1].str()) : std::string();
            const double now = epoch_seconds();
            const double first = since > 0 ? since : now;
            if (lock.timeout && std::chrono::duration<double>(now - first) >= *lock.timeout) {
                if (!token.empty()) drop_wait_script_.run(ctx.redis, {wait_key}, {token});
                return conflict(ctx, lock,
                                "lock " + lock.digest + " stayed busy longer than lock_timeout",
                                false);
            }
            return park(ctx, lock, token, first);
        }
        held = keeper_.hold(exec_key, owner, lock.ttl);
    }
    // With the lock taken by the refill, its release may wait for the next refill too.
    std::vector<redis::Command>* channel =
        pre && ctx.after_refill ? ctx.after_refill : ctx.after_job;
    auto release = [&] {
        keeper_.release(held);
        if (channel) {  // sent with the outcome or the next fetch: one round trip less
            // Built in place and moved into the command: each string is copied once.
            std::vector<std::string> keys(2);
            keys[0] = exec_key;
            keys[1] = keeper_.held_hash();
            std::vector<std::string> args(1, owner);
            channel->push_back(
                release_script_.deferred_command(ctx.redis, std::move(keys), std::move(args)));
            return;
        }
        try {
            release_script_.run(ctx.redis, {exec_key, keeper_.held_hash()}, {owner});
        } catch (const redis::Error& e) {
            // It expires by its TTL (no longer extended) or the reaper frees it.
            ctx.log.warn("jid={} could not release unique lock {}: {}", ctx.job.jid, exec_key,
                         e.what());
        }
    };
    try {
        next();
    } catch (...) {
        release();  // a failed job must not keep the lock: its retry contends like a new copy
        throw;
    }
    release();
}

void UniqueJobsMiddleware::park(JobContext& ctx, const LockSpec& lock,
                                const std::string& wait_token, double since) const {
    auto obj = RawJsonObject::parse(ctx.job.raw);
    if (!obj) throw JobError("Kiqd::InvalidLock", "payload is not a JSON object");
    if (!wait_token.empty()) obj->set_string("lock_wait_token", wait_token);
    // A payload member: written as both Ruby JSON writers write it, so that a Ruby client that
    // reschedules the parked copy (SortedEntry#reschedule) finds it by its bytes.
    obj->set("lock_wait_since", payload_seconds_text(since));
    const double at =
        epoch_seconds() + std::chrono::duration<double>(config_.unique_jobs.wait_interval).count();
    if (holds_client_lock_while_waiting(lock))
        schedule_holding(ctx, lock, at, obj->dump(), true);
    else
        ctx.redis.command({"ZADD", keys_.schedule(), score_text(at), obj->dump()});
    ctx.log.debug("class={} jid={} waits for unique lock {}", ctx.job.display_class(), ctx.job.jid,
                  lock.digest);
}

long long UniqueJobsMiddleware::schedule_holding(JobContext& ctx, const LockSpec& lock, double at,
                                                 std::string payload, bool even_if_held) const {
    auto keys = client_lock_keys(keys_, lock.digest);
    keys.push_back(keys_.schedule());
    return schedule_holding_script_
        .run(ctx.redis, keys,
             {ctx.job.jid, std::to_string(lock.client_pttl), std::to_string(lock.limit),
              score_text(at), lock.digest, std::move(payload), even_if_held ? "1" : "0"})
        .integer();
}

void UniqueJobsMiddleware::reschedule(JobContext& ctx, const LockSpec& lock,
                                      const std::string& why) const {
    const auto& job = ctx.job;
    const double at = epoch_seconds() + kRescheduleSeconds;
    // A copy that waited no longer does: it comes back as a new arrival.
    auto obj = RawJsonObject::parse(job.raw);
    if (!obj) throw JobError("Kiqd::InvalidLock", "payload is not a JSON object");
    obj->erase("lock_wait_token");
    obj->erase("lock_wait_since");
    if (lock.type == kUntilAndWhile && lock.client_lock) {
        if (schedule_holding(ctx, lock, at, obj->dump(), false) == 0) {
            ctx.log.warn(
                "class={} jid={} duplicate dropped (on_conflict: reschedule): another copy holds "
                "client lock {} and runs later; {}",
                job.display_class(), job.jid, lock.digest, why);
            return;
        }
    } else {
        ctx.redis.command({"ZADD", keys_.schedule(), score_text(at), obj->dump()});
    }
    ctx.log.info("class={} jid={} duplicate rescheduled in {} s: {}", job.display_class(), job.jid,
                 kRescheduleSeconds, why);
}

void UniqueJobsMiddleware::conflict(JobContext& ctx, const LockSpec& lock, const std::string& why,
                                    bool another_waits) const {
    const auto& job = ctx.job;
    increment(outcome_counters().unique_conflicts);
    if (lock.on_conflict == "reschedule" && another_waits) {
        // The gem's rescheduled copy holds the client lock, so its client rejects the next
        // copies: one copy waits, the others are dropped. The waiting copy runs later. (This
        // copy's own client lock went with the acquire.)
        ctx.log.warn("class={} jid={} duplicate dropped (on_conflict: reschedule): {}",
                     job.display_class(), job.jid, why);
        return;
    }
    if (lock.on_conflict == "reject") {
        const std::string entry =
            dead_.invalid_entry(job.raw, job.queue, InvalidJob{"Kiqd::UniqueConflict", why});
        ctx.redis.pipeline(dead_.kill_commands(entry, epoch_seconds()));
        ctx.log.warn("class={} jid={} duplicate sent to the dead set: {}", job.display_class(),
                     job.jid, why);
    } else if (lock.on_conflict == "reschedule") {
        reschedule(ctx, lock, why);
    } else {
        ctx.log.warn("class={} jid={} duplicate dropped (on_conflict: log): {}",
                     job.display_class(), job.jid, why);
    }
}

}  // namespace kiqd
