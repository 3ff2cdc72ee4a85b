#pragma once
// Fair-tenant rerouting, compatible with the sidekiq-fair_tenant gem v0.1.0 (Envek/
// sidekiq-fair_tenant lib/sidekiq/fair_tenant/client_middleware.rb;
// docs/data-model.md#fair-tenant-keys), so that Ruby producers using the gem and kiqd count in the
// same sliding windows.
//
// Rules come from the job's `fair_tenant_queues` ([{queue, threshold, per}]) or, when the job
// has none, from its class's `handlers:` entry in the YAML. The tenant is the job's
// `fair_tenant`, else args[N] for a class with `fair_tenant: {arg: N}`, else `apartment`. Each
// enqueue of a tenant's job is recorded in the ZSET
//   format(enqueues_key, job_class, fair_tenant, queue)   (default
//   "sidekiq-fair_tenant:enqueued:<class>:tenant:<tenant>"), member "jid:<jid>", score = the
// integer epoch second; entries older than max_throttling_window (86,400 s) are trimmed and the
// key expires after it. Then, for each rule, the entries within [floor(now − per), floor(now)]
// are counted (the new job included); a rule matches when threshold < count, and the LAST
// matching rule's queue becomes the job's queue. Registration and decision are one Lua script.
// Skipped: no rules, no tenant, or a job already rerouted — its queue differs from its class's
// `queue:` (as the gem compares with the class's queue), or, for a class without `queue:`, it is
// one of its rules' queues (kiqd's addition: the gem would count it again).
//
// Two places use it:
//  * FairTenantClientMiddleware — in every kiqd Client's chain (client.hpp): decides at push
//    time, writes `fair_tenant` into the job as the gem does, and marks the job with
//    `"fair_tenant_registered": true` so that the server side does not count it again.
//  * FairTenantServerMiddleware — first in the server chain: a job fetched from its main queue
//    that did not pass such a client (pushed by Ruby without the gem, redis-cli, any producer)
//    is registered when it starts; when its tenant is over a threshold it is LPUSHed (marked) to
//    the throttled queue instead of running, in the same script (which with reliable fetch also
//    takes it out of the working list), and counts as neither processed nor failed. A job the gem
//    already registered (its jid is in the ZSET) is left alone.
// Both are immutable after construction and shared by all threads.
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kiqd/client_middleware.hpp"
#include "kiqd/config.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/middleware_chain.hpp"
#include "kiqd/redis/script.hpp"

namespace kiqd {

// fair_probe(key, A, o): the server probe ('p' mode of the registration script, fair_tenant.cpp),
// as a Lua function of the enqueues ZSET `key` and that mode's ARGV laid out in the table `A`
// from A[o + 1] on (A[o + 1] = 'p', A[o + 2] = now, ...; an offset rather than a copy, so that
// the batched refill passes its own ARGV). Returns false (nothing written) when `key` holds
// another type, -1 when A[o + 4] is registered already, -2 (nothing written) when the winning
// rule would move the job, else registers it and returns the rule (0: none). Shared by that
// script and the batched refill's (batch_acquire.cpp).
//
// Redis's CPU for this is mostly the interpreter's cost per redis.call, so it makes only the
// calls that can change the outcome. ZCARD first (its WRONGTYPE error, under pcall, is the type
// check). A rule's count is ZCOUNT + 1 <= ZCARD + 1, so a rule whose threshold is at least
// ZCARD + 1 cannot match and needs no ZCOUNT; an empty (absent) key counts 1 for every rule
// without one. An absent key holds neither the jid nor anything to trim, so it gets neither the
// ZSCORE nor the ZREMRANGEBYSCORE: a tenant's first job in the window costs ZCARD, ZADD, EXPIRE.
#define KIQD_FAIR_PROBE_LUA                                                              \
    "local function fair_probe(key, A, o)\n"                                             \
    "  local card = redis.pcall('zcard', key)\n"                                         \
    "  if type(card) ~= 'number' then return false end\n"                                \
    "  if card > 0 and redis.call('zscore', key, A[o + 4]) then return -1 end\n"         \
    "  local now, max, n = tonumber(A[o + 2]), tonumber(A[o + 3]), tonumber(A[o + 5])\n" \
    "  local t = math.floor(now)\n"                                                      \
    "  local oldest = math.floor(now - max) + 1  -- what the trim below keeps\n"         \
    "  local chosen = 0\n"                                                               \
    "  for i = 1, n do\n"                                                                \
    "    local threshold = tonumber(A[o + 5 + 2 * i])\n"                                 \
    "    if threshold < card + 1 then\n"                                                 \
    "      local count = 1\n"                                                            \
    "      if card > 0 then\n"                                                           \
    "        local per = A[o + 4 + 2 * i]\n"                                             \
    "        if per == '' then per = max else per = tonumber(per) end\n"                 \
    "        count = redis.call('zcount', key,\n"                                        \
    "          string.format('%d', math.max(math.floor(now - per), oldest)),\n"          \
    "          string.format('%d', t)) + 1\n"                                            \
    "      end\n"                                                                        \
    "      if threshold < count then chosen = i end\n"                                   \
    "    end\n"                                                                          \
    "  end\n"                                                                            \
    "  if chosen > 0 and A[o + 5 + 2 * n + chosen] ~= '' then return -2 end\n"           \
    "  if card > 0 then\n"                                                               \
    "    redis.call('zremrangebyscore', key, '-inf', string.format('%d', oldest - 1))\n" \
    "  end\n"                                                                            \
    "  redis.call('zadd', key, string.format('%d', t), A[o + 4])\n"                      \
    "  redis.call('expire', key, A[o + 3])\n"                                            \
    "  return chosen\n"                                                                  \
    "end\n"

// The payload field with which kiqd's client marks a job it registered.
inline constexpr const char* kFairTenantRegistered = "fair_tenant_registered";

// What one job's registration needs.
struct FairTenantPlan {
    std::string job_class;        // `wrapped` (ActiveJob) or `class`: the key's %<job_class>s
    std::string tenant;           // as Ruby's to_s would print it (the key's %<fair_tenant>s)
    nlohmann::json tenant_value;  // the value, to write into `fair_tenant` when absent
    std::string key;              // the ZSET, with the key prefix
    std::vector<FairTenantRule> rules;
};

// The rules, tenants and settings of a process, copied from its Config.
class FairTenant {
  public:
    FairTenant(const Config& config, Keys keys);

    // nullopt when the job is not to be registered (no rules, no tenant, already rerouted).
    // `queue` is the job's current queue. Throws std::invalid_argument for a malformed
    // `fair_tenant_queues` in the job.
    std::optional<FairTenantPlan> plan(const nlohmann::json& job, const std::string& queue) const;
    std::optional<FairTenantPlan> plan(const nlohmann::ordered_json& job,
                                       const std::string& queue) const;
    // The same for a fetched job in its queue, from the few members the plan reads (and the
    // tenant argument alone) rather than the tree of the whole payload.
    std::optional<FairTenantPlan> plan(const Job& job) const;

    // Client side: register the job and decide. Returns the 1-based index of the winning rule,
    // 0 when none matched. One round trip.
    size_t register_and_decide(redis::Connection& redis, const FairTenantPlan& plan,
                               const std::string& jid, double now) const;
    // Server side: the same, unless the jid is already registered (-1: left alone); when a rule
    // whose `moved_payloads` entry is not empty wins, that payload is LPUSHed to the rule's
    // queue (with SADD queues) in the same script. `moved_payloads` has one entry per rule.
    // With reliable fetch, `working_list` holds `fetched` (the job as fetched): a moved job
    // leaves it in the same script. `pending`: sent first (Script::run_after).
    long long register_and_move(redis::Connection& redis, const FairTenantPlan& plan,
                                const std::string& jid, double now,
                                const std::vector<std::string>& moved_payloads,
                                const std::string* working_list = nullptr,
                                const std::string& fetched = {},
                                std::vector<redis::Command>* pending = nullptr) const;

    // Server side, the common case first: registers the job and returns what register_and_move
    // would, without the payloads, unless the winning rule would move it (`would_move`: one
    // entry per rule); then it writes nothing and returns -2, and the caller builds the payloads
    // and calls register_and_move. One round trip; `pending` as there.
    long long register_unless_moved(redis::Connection& redis, const FairTenantPlan& plan,
                                    const std::string& jid, double now,
                                    const std::vector<bool>& would_move,
                                    std::vector<redis::Command>* pending = nullptr) const;

    // The probe's ARGV (register_unless_moved).
    std::vector<std::string> probe_args(const FairTenantPlan& plan, const std::string& jid,
                                        double now, const std::vector<bool>& would_move) const;
    // The same from ARGV[2] (`now`) on, appended to `out`: a batched refill's item
    // (batch_acquire.cpp), whose kind takes ARGV[1]'s place. `now` is now_text(seconds), which
    // a refill formats once for all its jobs.
    void append_probe_args(std::vector<std::string>& out, const FairTenantPlan& plan,
                           const std::string& jid, std::string now,
                           const std::vector<bool>& would_move) const;
    static std::string now_text(double now);

    const Keys& keys() const { return keys_; }
    long long max_window() const { return settings_.max_throttling_window; }
    // Whether some class configures fair_tenant_queues. Without, only a payload's own
    // `fair_tenant_queues` can make plan() return a plan.
    bool has_class_rules() const { return has_class_rules_; }

  private:
    struct ClassRules {
        std::string queue;
        std::vector<FairTenantRule> rules;
        std::optional<int> tenant_arg;
    };
    // `tenant_arg(i)`: the job's tenant argument i (nullopt when it has none).
    // `job_class`: the key's %<job_class>s, `wrapped` or `class` (callers read it their way).
    template <class Json, class TenantArg>
    std::optional<FairTenantPlan> plan_impl(const Json& job, std::string job_class,
                                            const std::string& queue,
                                            const TenantArg& tenant_arg) const;
    // ARGV[2..5+2n]: now, max window, member, n, then each rule's per and threshold.
    void append_rule_args(std::vector<std::string>& out, const FairTenantPlan& plan,
                          const std::string& jid, std::string now) const;
    std::vector<std::string> script_args(char mode, const FairTenantPlan& plan,
                                         const std::string& jid, double now) const;

    Keys keys_;
    FairTenantConfig settings_;
    std::map<std::string, ClassRules> classes_;
    bool has_class_rules_ = false;
    redis::Script script_;
};

class FairTenantClientMiddleware final : public ClientMiddleware {
  public:
    FairTenantClientMiddleware(const Config& config, Keys keys);
    std::string_view name() const override { return "fair_tenant"; }
    void call(nlohmann::ordered_json& job, redis::Connection& redis,
              const ClientNext& next) const override;

  private:
    FairTenant fair_;
};

class FairTenantServerMiddleware final : public ServerMiddleware {
  public:
    FairTenantServerMiddleware(const Config& config, Keys keys);
    std::string_view name() const override { return "fair_tenant"; }
    void call(JobContext& ctx, const Next& next) const override;

  private:
    // True the first time a class's payload rules are found unusable (processor threads share
    // the set, under the mutex).
    bool first_warning_for(const std::string& job_class) const;
    FairTenant fair_;
    mutable std::mutex warned_mutex_;
    mutable std::set<std::string> warned_classes_;
};

}  // namespace kiqd
