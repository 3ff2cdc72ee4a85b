#include "middleware/fair_tenant.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "common/outcome_counters.hpp"
#include "config/enqueues_key.hpp"
#include "fetch/refill_acquirer.hpp"
#include "job/raw_json_object.hpp"
#include "kiqd/clock.hpp"
#include "redis/lua_type_guard.hpp"

namespace kiqd {
namespace {

// The gem's register_job (MULTI { ZREMRANGEBYSCORE; ZADD; EXPIRE }) and assign_queue (one ZCOUNT
// per rule, the last match wins) in one script. Times are the caller's clock, as the gem uses
// the pushing process's Time.now; every bound is floored to whole seconds as the gem's .to_i
// does, and both ZREMRANGEBYSCORE and ZCOUNT bounds are inclusive (the gem passes integers).
//
// KEYS[1]     the tenant's enqueues ZSET (member "jid:<jid>", score = integer epoch second)
// server mode only:
// KEYS[2]     the `queues` set
// KEYS[2+i]   queue:<queue of rule i>, for each rule i in 1..n
// ARGV[1]     'c' (client: register and decide) or 's' (server: register, decide and move)
// ARGV[2]     now, in seconds (fractional)
// ARGV[3]     the max throttling window, in whole seconds: entries scored at or below
//             floor(now − ARGV[3]) are trimmed, and KEYS[1] expires after it
// ARGV[4]     the member to register, "jid:<jid>"
// ARGV[5]     n, the number of rules; then for each rule i in 1..n:
// ARGV[4+2i]  its `per` window in seconds ('' = the max window)
// ARGV[5+2i]  its threshold: it matches when threshold < the count of entries scored within
//             [floor(now − per), floor(now)], the new entry included
// server mode only, for each rule i in 1..n:
// ARGV[5+2n+i] the payload to LPUSH to KEYS[2+i] when rule i wins ('' = do not move: the job
//             is already in that queue)
// ARGV[5+3n+i] rule i's queue name (SADDed to KEYS[2] with the push)
// server mode with reliable fetch only:
// KEYS[3+n]   the working list holding the job, which it leaves (LREM 1) when it is moved, so
//             that a crash cannot leave it both there and in the throttled queue
// ARGV[6+4n]  the job as fetched (the working list's entry)
//
// ARGV[1] 'p' (server probe): as 's', with ARGV[5+2n+i] a mark ('1': rule i would move the job,
//             '' = it would not) instead of a payload. The counts are taken before writing
//             (the new entry counted in, the entries the trim would drop left out), so that when
//             the winning rule would move the job it returns -2 with nothing written: the caller
//             then builds the payloads and calls again in 's' mode. Otherwise it registers the
//             job as 's' does and returns the same, touching KEYS[1] alone. Most jobs match no
//             rule, so most pay neither the payloads nor their type checks. It is fair_probe
//             (fair_tenant.hpp), which skips the calls that cannot change its answer.
//
// Returns the 1-based index of the winning rule (the last that matched), 0 when none matched,
// and in server mode -1 when ARGV[4] is already in KEYS[1] (registered by the gem at push time
// or by an earlier run of the same jid; nothing written). Client mode registers a member that
// is already present again (its score becomes floor(now)). A WRONGTYPE error, and nothing
// written, when a key it may write holds another type (lua_type_guard.hpp): in server mode the
// job is then still in hand, and fails instead of being registered but not moved.
constexpr const char* kScript = KIQD_LUA_TYPE_GUARD KIQD_FAIR_PROBE_LUA R"lua(
if ARGV[1] == 'p' then
  -- false: KEYS[1] holds another type, which wrong_type then reports (nothing written)
  local r = fair_probe(KEYS[1], ARGV, 0)
  if r then return r end
  return wrong_type({KEYS[1], 'zset'})
end
local checks = {KEYS[1], 'zset'}
if ARGV[1] == 's' then
  checks[3] = KEYS[2]
  checks[4] = 'set'
  for i = 3, #KEYS do
    checks[#checks + 1] = KEYS[i]
    checks[#checks + 1] = 'list'
  end
end
local refused = wrong_type(checks)
if refused then return refused end
local key = KEYS[1]
local now = tonumber(ARGV[2])
local max = tonumber(ARGV[3])
local n = tonumber(ARGV[5])
if ARGV[1] ~= 'c' and redis.call('zscore', key, ARGV[4]) then return -1 end
local t = math.floor(now)
redis.call('zremrangebyscore', key, '-inf', string.format('%d', math.floor(now - max)))
redis.call('zadd', key, string.format('%d', t), ARGV[4])
redis.call('expire', key, ARGV[3])
local chosen = 0
for i = 1, n do
  local per = ARGV[4 + 2 * i]
  if per == '' then per = max else per = tonumber(per) end
  local count = redis.call('zcount', key, string.format('%d', math.floor(now - per)),
                           string.format('%d', t))
  if tonumber(ARGV[5 + 2 * i]) < count then chosen = i end
end
if ARGV[1] == 's' and chosen > 0 then
  local payload = ARGV[5 + 2 * n + chosen]
  if payload ~= '' then
    redis.call('sadd', KEYS[2], ARGV[5 + 3 * n + chosen])
    redis.call('lpush', KEYS[2 + chosen], payload)
    if KEYS[3 + n] then redis.call('lrem', KEYS[3 + n], 1, ARGV[6 + 4 * n]) end
  end
end
return chosen
)lua";

// What Ruby's to_s gives for the usual tenant values (strings and integers; floats as JSON
// prints them, which matches Ruby for the common cases); anything else is its JSON text.
std::string tenant_text(const nlohmann::json& v) {
    if (v.is_string()) return v.get<std::string>();
    return v.dump();
}

// Ruby truthiness: nil and false are "no tenant"; "" and 0 are tenants.
bool truthy(const nlohmann::json& v) {
    return !v.is_null() && !(v.is_boolean() && !v.get<bool>());
}

// A number, or a string holding one: with ActiveSupport loaded (any Rails app) the gem's README
// form `per: 1.hour` reaches the payload as "3600", and the gem itself accepts it.
template <class Json>
std::optional<double> number_of(const Json& v) {
    double d = 0;
    if (v.is_number()) {
        d = v.template get<double>();
    } else if (v.is_string()) {
        const std::string s = v.template get<std::string>();
        size_t used = 0;
        try {
            d = std::stod(s, &used);
        } catch (const std::exception&) {
            return std::nullopt;
        }
        if (used != s.size()) return std::nullopt;
    } else {
        return std::nullopt;
    }
    if (!std::isfinite(d)) return std::nullopt;
    return d;
}

template <class Json>
std::vector<FairTenantRule> rules_from_job(const Json& v) {
    if (!v.is_array())
        throw std::invalid_argument(
            "fair_tenant_queues must be an array of {queue, threshold, per}");
    std::vector<FairTenantRule> rules;
    for (size_t i = 0; i < v.size(); ++i) {
        const auto& r = v[i];
        const std::string where = "fair_tenant_queues[" + std::to_string(i) + "]";
        if (!r.is_object()) throw std::invalid_argument(where + " must be an object");
        FairTenantRule rule;
        auto q = r.find("queue");
        if (q == r.end() || !q->is_string() || q->template get<std::string>().empty())
            throw std::invalid_argument(where + ".queue must be a non-empty string");
        rule.queue = q->template get<std::string>();
        auto t = r.find("threshold");
        const auto threshold = t == r.end() ? std::nullopt : number_of(*t);
        if (!threshold) throw std::invalid_argument(where + ".threshold must be a number");
        rule.threshold = *threshold;
        if (auto p = r.find("per"); p != r.end() && !p->is_null()) {
            const auto per = number_of(*p);
            if (!per || *per <= 0 || *per > 1e10)
                throw std::invalid_argument(where + ".per must be a number of seconds > 0");
            rule.per = *per;
        }
        rules.push_back(std::move(rule));
    }
    return rules;
}

std::string number_text(double v) {
    if (v == std::floor(v) && std::abs(v) < 1e15)
        return fmt::format("{}", static_cast<long long>(v));
    return fmt::format("{}", v);
}

}  // namespace

FairTenant::FairTenant(const Config& config, Keys keys)
    : keys_(std::move(keys)), settings_(config.fair_tenant), script_(kScript) {
    for (const auto& [name, spec] : config.classes) {
        if (spec.queue.empty() && spec.fair_tenant_queues.empty() && !spec.fair_tenant_arg)
            continue;
        classes_[name] = ClassRules{spec.queue, spec.fair_tenant_queues, spec.fair_tenant_arg};
        has_class_rules_ = has_class_rules_ || !spec.fair_tenant_queues.empty();
    }
}

// args[i] of a job tree, or for ActiveJob (a job with `wrapped`) args[0]["arguments"][i], as
// the gem reads them; nullopt when there is none.
template <class Json>
std::optional<nlohmann::json> tree_tenant_arg(const Json& job, size_t i) {
    const Json* args = nullptr;
    if (auto a = job.find("args"); a != job.end() && a->is_array()) args = &*a;
    if (args && job.contains("wrapped") && !args->empty() && (*args)[0].is_object()) {
        auto inner = (*args)[0].find("arguments");
        args = inner != (*args)[0].end() && inner->is_array() ? &*inner : nullptr;
    }
    if (!args || i >= args->size()) return std::nullopt;
    return nlohmann::json((*args)[i]);
}

// A tenant argument's JSON text (checked by parse_job's scan) as a value: the usual tenant, a
// string (json_unquote: without escapes, cut out directly) or a non-negative integer of up to 18
// digits, is built without the parser (json::parse would give the same: a string, or a
// number_unsigned), anything else parsed. Called per fetched job; the parser's set-up was a
// measurable part of a refill's CPU.
static nlohmann::json scalar_json(std::string_view text) {
    if (text.size() >= 2 && text.front() == '"') return nlohmann::json(json_unquote(text));
    if (!text.empty() && text.size() <= 18 &&
        std::all_of(text.begin(), text.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
        std::uint64_t v = 0;
        for (char ch : text) v = v * 10 + static_cast<std::uint64_t>(ch - '0');
        return nlohmann::json(v);
    }
    return nlohmann::json::parse(text);
}

// The same read from a fetched job's text: only that argument is parsed, never the others.
std::optional<nlohmann::json> raw_tenant_arg(const Job& job, size_t i) {
    std::optional<std::string_view> text;
    if (!job.member_json("wrapped")) {
        text = job.arg_json(i);
    } else if (auto first = job.arg_json(0); first && first->front() == '{') {
        if (auto inner = json_member_text(*first, "arguments"); inner && inner->front() == '[')
            text = json_element_text(*inner, i);
    } else if (first) {
        text = job.arg_json(i);  // args[0] is not an object: args themselves, as above
    }
    if (!text) return std::nullopt;
    return scalar_json(*text);
}

// The key's %<job_class>s: `wrapped` (ActiveJob) when it is a string, else `class`.
template <class Json>
std::string tree_job_class(const Json& job) {
    if (auto w = job.find("wrapped"); w != job.end() && w->is_string())
        return w->template get<std::string>();
    if (auto c = job.find("class"); c != job.end() && c->is_string())
        return c->template get<std::string>();
    return {};
}

template <class Json, class TenantArg>
std::optional<FairTenantPlan> FairTenant::plan_impl(const Json& job, std::string job_class,
                                                    const std::string& queue,
                                                    const TenantArg& tenant_arg) const {
    FairTenantPlan plan;
    plan.job_class = std::move(job_class);
    const auto cls_it = classes_.find(plan.job_class);
    const ClassRules* cls = cls_it == classes_.end() ? nullptr : &cls_it->second;

    // enabled?: rules (the job's own win, and an empty list there means "none", as .blank?)
    if (auto r = job.find("fair_tenant_queues"); r != job.end() && !r->is_null())
        plan.rules = rules_from_job(*r);
    else if (cls)
        plan.rules = cls->rules;
    if (plan.rules.empty()) return std::nullopt;
    // ... and not rerouted already.
    if (cls && !cls->queue.empty()) {
        if (queue != cls->queue) return std::nullopt;
    } else {
        for (const auto& rule : plan.rules)
            if (rule.queue == queue) return std::nullopt;
    }

    // The tenant: job["fair_tenant"] ||= the class's (args[N] here) || job["apartment"].
    if (auto t = job.find("fair_tenant"); t != job.end() && truthy(nlohmann::json(*t))) {
        plan.tenant_value = nlohmann::json(*t);
    } else if (cls && cls->tenant_arg) {
        auto arg = tenant_arg(static_cast<size_t>(*cls->tenant_arg));
        if (arg && truthy(*arg)) plan.tenant_value = std::move(*arg);
    }
    if (plan.tenant_value.is_null()) {
        if (auto a = job.find("apartment"); a != job.end() && truthy(nlohmann::json(*a)))
            plan.tenant_value = nlohmann::json(*a);
    }
    if (plan.tenant_value.is_null()) return std::nullopt;  // the gem logs "won't be throttled"
    plan.tenant = tenant_text(plan.tenant_value);
    plan.key = keys_.prefix() +
               format_enqueues_key(settings_.enqueues_key, queue, plan.job_class, plan.tenant);
    return plan;
}

std::optional<FairTenantPlan> FairTenant::plan(const nlohmann::json& job,
                                               const std::string& queue) const {
    return plan_impl(job, tree_job_class(job), queue,
                     [&](size_t i) { return tree_tenant_arg(job, i); });
}

std::optional<FairTenantPlan> FairTenant::plan(const nlohmann::ordered_json& job,
                                               const std::string& queue) const {
    return plan_impl(job, tree_job_class(job), queue,
                     [&](size_t i) { return tree_tenant_arg(job, i); });
}

std::optional<FairTenantPlan> FairTenant::plan(const Job& job) const {
    // The members the plan reads, each parsed on its own, and the tenant argument alone: a
    // job's args can be as large as the payload limit, and their tree many times that.
    // The class is not parsed again: parse_job keeps `class` and `wrapped`, and refuses a job
    // where either is present but not a string, so a present `wrapped` is job.wrapped (even "").
    const nlohmann::json fields = job.members({"fair_tenant_queues", "fair_tenant", "apartment"});
    return plan_impl(fields, job.member_json("wrapped") ? job.wrapped : job.job_class, job.queue,
                     [&](size_t i) { return raw_tenant_arg(job, i); });
}

std::string FairTenant::now_text(double now) {
    return fmt::format("{:.6f}", now);
}

void FairTenant::append_rule_args(std::vector<std::string>& out, const FairTenantPlan& plan,
                                  const std::string& jid, std::string now) const {
    out.push_back(std::move(now));
    out.push_back(std::to_string(settings_.max_throttling_window));
    out.push_back("jid:" + jid);
    out.push_back(std::to_string(plan.rules.size()));
    for (const auto& rule : plan.rules) {
        out.push_back(rule.per ? number_text(*rule.per) : "");
        out.push_back(number_text(rule.threshold));
    }
}

std::vector<std::string> FairTenant::script_args(char mode, const FairTenantPlan& plan,
                                                 const std::string& jid, double now) const {
    std::vector<std::string> args{std::string(1, mode)};
    append_rule_args(args, plan, jid, now_text(now));
    return args;
}

size_t FairTenant::register_and_decide(redis::Connection& redis, const FairTenantPlan& plan,
                                       const std::string& jid, double now) const {
    auto reply = script_.run(redis, {plan.key}, script_args('c', plan, jid, now));
    return static_cast<size_t>(reply.integer());
}

long long FairTenant::register_and_move(redis::Connection& redis, const FairTenantPlan& plan,
                                        const std::string& jid, double now,
                                        const std::vector<std::string>& moved_payloads,
                                        const std::string* working_list, const std::string& fetched,
                                        std::vector<redis::Command>* pending) const {
    std::vector<std::string> keys{plan.key, keys_.queues()};
    for (const auto& rule : plan.rules) keys.push_back(keys_.queue(rule.queue));
    auto args = script_args('s', plan, jid, now);
    for (const auto& p : moved_payloads) args.push_back(p);
    for (const auto& rule : plan.rules) args.push_back(rule.queue);
    if (working_list) {
        keys.push_back(*working_list);
        args.push_back(fetched);
    }
    return script_.run_after(redis, pending, keys, args).integer();
}

std::vector<std::string> FairTenant::probe_args(const FairTenantPlan& plan, const std::string& jid,
                                                double now,
                                                const std::vector<bool>& would_move) const {
    std::vector<std::string> args{"p"};
    append_probe_args(args, plan, jid, now_text(now), would_move);
    return args;
}

void FairTenant::append_probe_args(std::vector<std::string>& out, const FairTenantPlan& plan,
                                   const std::string& jid, std::string now,
                                   const std::vector<bool>& would_move) const {
    append_rule_args(out, plan, jid, std::move(now));
    for (bool m : would_move) out.push_back(m ? "1" : "");
}

long long FairTenant::register_unless_moved(redis::Connection& redis, const FairTenantPlan& plan,
                                            const std::string& jid, double now,
                                            const std::vector<bool>& would_move,
                                            std::vector<redis::Command>* pending) const {
    return script_.run_after(redis, pending, {plan.key}, probe_args(plan, jid, now, would_move))
        .integer();
}

FairTenantClientMiddleware::FairTenantClientMiddleware(const Config& config, Keys keys)
    : fair_(config, std::move(keys)) {}

void FairTenantClientMiddleware::call(nlohmann::ordered_json& job, redis::Connection& redis,
                                      const ClientNext& next) const {
    const std::string queue = job.value("queue", std::string("default"));
    auto plan = fair_.plan(job, queue);
    if (!plan) return next();
    if (auto t = job.find("fair_tenant"); t == job.end() || !truthy(nlohmann::json(*t)))
        job["fair_tenant"] = plan->tenant_value;
    const std::string jid =
        job["jid"].is_string() ? job["jid"].get<std::string>() : job["jid"].dump();
    const size_t chosen = fair_.register_and_decide(redis, *plan, jid, epoch_seconds());
    if (chosen > 0) job["queue"] = plan->rules[chosen - 1].queue;
    job[kFairTenantRegistered] = true;
    next();
}

FairTenantServerMiddleware::FairTenantServerMiddleware(const Config& config, Keys keys)
    : fair_(config, std::move(keys)) {}

bool FairTenantServerMiddleware::first_warning_for(const std::string& job_class) const {
    std::lock_guard<std::mutex> lock(warned_mutex_);
    // Bounded: a flood of distinct class names must not grow this without end.
    if (warned_classes_.size() >= 1000) return false;
    return warned_classes_.insert(job_class).second;
}

void FairTenantServerMiddleware::call(JobContext& ctx, const Next& next) const {
    const auto& job = ctx.job;
    // A batched refill registered it already and found it stays here (refill_acquirer.hpp): it
    // did so only where this call would reach its own registration (no registered mark, a
    // plan, a jid), so the plan is not worked out a second time.
    if (ctx.acquired)
        if (const Acquired* a = ctx.acquired->find(Acquired::Kind::fair_tenant);
            a && ctx.acquired->claim(Acquired::Kind::fair_tenant, a->key))
            return next();
    // The common case, no rules anywhere: plan() would return none, so its five members are
    // not read (this middleware is in every chain; reading them was a measurable part of a
    // plain job's CPU). fair_tenant_queues is an indexed member: a lookup, not a pass over the
    // payload, and the same key plan() reads.
    if (!fair_.has_class_rules() && !job.member_json("fair_tenant_queues")) return next();
    if (auto m = job.member(kFairTenantRegistered); m && truthy(*m))
        return next();  // a kiqd client registered it at push time
    std::optional<FairTenantPlan> plan;
    try {
        plan = fair_.plan(job);
    } catch (const std::invalid_argument& e) {
        // Fairness is advice about where a job waits, never a reason to fail it: the job runs
        // where it is, and the class's bad rules are reported once, not once per job.
        if (first_warning_for(job.display_class()))
            ctx.log.warn(
                "class={} jid={}: its fair-tenant rules cannot be used ({}); its jobs run "
                "in the queue they were fetched from (logged once per class)",
                job.display_class(), job.jid, e.what());
        return next();
    }
    if (!plan || job.jid.empty()) return next();
    // Registered, and decided, without the payloads first: they are built only when a rule
    // would move the job (the probe then wrote nothing).
    std::vector<bool> would_move;
    for (const auto& rule : plan->rules) would_move.push_back(rule.queue != job.queue);
    const double now = epoch_seconds();
    long long chosen =
        fair_.register_unless_moved(ctx.redis, *plan, job.jid, now, would_move, ctx.after_job);
    if (chosen != -2) return next();  // not moved: -1 (registered before), 0 or a rule in place
    // One payload per rule: the job as the gem would have pushed it to that rule's queue.
    auto obj = RawJsonObject::parse(job.raw);
    if (!obj) return next();  // parse_job accepted it, so this does not happen
    if (auto t = job.member("fair_tenant"); !t || !truthy(*t))
        obj->set("fair_tenant", plan->tenant_value.dump());
    obj->set(kFairTenantRegistered, "true");
    std::vector<std::string> moved;
    for (const auto& rule : plan->rules) {
        if (rule.queue == job.queue) {
            moved.emplace_back();  // "rerouted" to where it is: just run it
            continue;
        }
        obj->set_string("queue", rule.queue);
        moved.push_back(obj->dump());
    }
    chosen = fair_.register_and_move(ctx.redis, *plan, job.jid, now, moved, ctx.working_list,
                                     job.raw, ctx.after_job);
    if (chosen > 0 && !moved[static_cast<size_t>(chosen - 1)].empty()) {
        ctx.working_list = nullptr;  // the script took it out (JobContext::working_list)
        increment(outcome_counters().rerouted);
        ctx.log.info(
            "class={} jid={} tenant={} over its fair share: moved from queue:{} to queue:{}",
            job.display_class(), job.jid, plan->tenant, job.queue,
            plan->rules[static_cast<size_t>(chosen - 1)].queue);
        return;  // stored in the throttled queue by the script: not run, not failed
    }
    next();
}

}  // namespace kiqd
