#include "server/chain_assembly.hpp"

#include <vector>

#include "middleware/fair_tenant.hpp"
#include "middleware/limits/concurrency_limit.hpp"
#include "middleware/limits/throttle.hpp"
#include "middleware/metadata_middleware.hpp"
#include "middleware/unique/unique_jobs.hpp"
#include "server/connection_budget.hpp"

namespace kiqd {

ChainAssembly::ChainAssembly(const Runtime& rt, const SharedState& shared, MiddlewareChain& chain)
    : lock_keeper_(rt.keys, named_connection(rt.connection_options, rt.identity, "lock-keeper"),
                   rt.config.unique_jobs.reaper_interval, rt.identity, rt.log) {
    const Config& config = rt.config;
    std::vector<std::shared_ptr<const ServerMiddleware>> builtins;  // outermost first

    // Outermost, so that its run time covers the other middlewares; a job one of them parks is
    // not recorded (only jobs whose handler ran are).
    if (config.job_metadata)
        builtins.push_back(
            std::make_shared<MetadataMiddleware>(shared.catalog, shared.job_metrics));
    // Before the others: a parked job is neither rerouted nor counted, and takes no lock.
    builtins.push_back(std::make_shared<PauseControlMiddleware>(
        shared.pause_state, shared.parked_jobs, shared.pause_strategies, rt.keys));
    // Fair-tenant rerouting before the limits: a job moved to a throttled queue is not counted
    // and takes no lock.
    builtins.push_back(std::make_shared<FairTenantServerMiddleware>(config, rt.keys));
    // Limits go outside the unique-jobs middleware, so a job they park holds no unique lock
    // while it waits. Each is in the chain only when some class configures it. The throttle is
    // outside the concurrency limit: a job it reschedules takes no slot.
    if (ThrottleMiddleware::configured(config))
        builtins.push_back(std::make_shared<ThrottleMiddleware>(config, rt.keys));
    if (ConcurrencyLimitMiddleware::configured(config)) {
        slot_keeper_ = std::make_unique<SlotKeeper>(
            rt.keys, named_connection(rt.connection_options, rt.identity, "slot-keeper"),
            config.concurrency_limits, rt.identity, rt.log);
        builtins.push_back(std::make_shared<ConcurrencyLimitMiddleware>(
            config, rt.keys, *slot_keeper_, rt.identity));
    }
    // Innermost of kiqd's own, right around the user's chain: a job takes its EXEC lock only
    // once every middleware above has let it through.
    builtins.push_back(std::make_shared<UniqueJobsMiddleware>(config, rt.keys, rt.dead, rt.retry,
                                                              lock_keeper_, rt.identity));

    // Whatever the configuration: the gem's client may lock any job.
    batch_acquire_ = std::make_unique<BatchAcquire>(config, rt.keys, rt.limits, lock_keeper_,
                                                    slot_keeper_.get(), rt.identity);

    // `chain` already holds the user's chain: put kiqd's own in front of it, innermost first.
    for (auto it = builtins.rbegin(); it != builtins.rend(); ++it) chain.prepend(*it);
}

}  // namespace kiqd
