#pragma once
// ChainAssembly: puts kiqd's own server middlewares in front of the user's `server_middleware:`
// chain, and owns the background keepers two of them need: the LockKeeper (unique jobs' EXEC
// locks) and, when some class has a concurrency_limit, the SlotKeeper. Built once by the
// Launcher on the main thread, before any processor thread starts; the Launcher starts and stops
// the keepers' threads.
//
// The resulting chain, outermost first:
//   job metadata (unless `job_metadata: false`) → pause control → fair tenant
//   → throttle (when configured) → concurrency limit (when configured) → unique jobs
//   → the user's `server_middleware:` chain → handler
// Each is outside the next so that a job one of them parks or moves is not counted or locked
// by the next; chain_assembly.cpp says why each sits where it does.
#include <memory>

#include "config/worker_catalog.hpp"
#include "kiqd/middleware_chain.hpp"
#include "kiqd/pause_strategy.hpp"
#include "middleware/batch_acquire.hpp"
#include "middleware/job_metrics.hpp"
#include "middleware/limits/slot_keeper.hpp"
#include "middleware/pause/pause_control.hpp"
#include "middleware/unique/lock_keeper.hpp"
#include "server/runtime.hpp"

namespace kiqd {

class ChainAssembly {
  public:
    // Launcher-owned state the built-in middlewares share with other components; it all
    // outlives the chain.
    struct SharedState {
        const PauseState& pause_state;  // written by the PauseController
        const ParkedJobs& parked_jobs;  // resumed by the PauseController
        const PauseStrategies& pause_strategies;
        const WorkerCatalog& catalog;  // worker metadata
        JobMetrics& job_metrics;       // served by the MetricsServer
    };

    // Creates the keepers and prepends the built-in middlewares to `chain`, which holds the
    // user's chain and is the one `rt.chain` refers to.
    ChainAssembly(const Runtime& rt, const SharedState& shared, MiddlewareChain& chain);

    LockKeeper& lock_keeper() { return lock_keeper_; }
    SlotKeeper* slot_keeper() { return slot_keeper_.get(); }  // null: no concurrency_limit
    // What a batched refill acquires ahead of the unique-jobs and concurrency middlewares
    // (batch_acquire.hpp).
    const RefillAcquirer* refill_acquirer() const { return batch_acquire_.get(); }

  private:
    LockKeeper lock_keeper_;
    std::unique_ptr<SlotKeeper> slot_keeper_;
    std::unique_ptr<BatchAcquire> batch_acquire_;  // after the keepers it registers with
};

}  // namespace kiqd
