#pragma once
// Runtime: the shared, long-lived parts every worker component needs, built once by the
// Launcher and outliving all threads. Everything reachable from here is either immutable after
// start (config, keys, registries, chain, fetcher) or thread-safe (work state, lifecycle,
// health, logger).
#include <spdlog/logger.h>

#include <chrono>
#include <memory>
#include <string>

#include "fetch/fetcher.hpp"
#include "job/dead_set.hpp"
#include "job/job_retry.hpp"
#include "kiqd/client.hpp"
#include "kiqd/config.hpp"
#include "kiqd/handler_registry.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/middleware_chain.hpp"
#include "kiqd/redis/connection.hpp"
#include "server/redis_health.hpp"
#include "server/work_state.hpp"

namespace kiqd {

class CpuGate;
class ExecutionMetrics;

// Quiet (stop fetching) and hard stop (the deadline passed), observable and awaitable.
class Lifecycle {
  public:
    void quiet() { quiet_.request_stop(); }
    bool is_quiet() const { return quiet_.stop_requested(); }
    // Sleeps for `d` unless quieted first; returns true when quiet.
    bool wait_quiet_for(std::chrono::milliseconds d) const { return quiet_.wait_for(d); }
    StopSignal hard_stop;  // raised when running jobs have been pushed back at the deadline

  private:
    StopSignal quiet_;
};

struct Runtime {
    const Config& config;
    const Keys& keys;
    std::string identity;
    spdlog::logger& log;
    redis::ConnectionOptions connection_options;
    const Fetcher& fetcher;
    const HandlerRegistry& handlers;
    const MiddlewareChain& chain;
    const DeadSet& dead;
    const JobRetry& retry;
    WorkState& work;
    Lifecycle& lifecycle;
    RedisHealth& health;
    JobLimits limits;
    const Client* client = nullptr;  // for JobContext::enqueue; null in tests that need none
    // The cpu-bound cap (cpu_gate.hpp); null when no declared class is cpu-bound.
    CpuGate* cpu_gate = nullptr;
    // Sidekiq 7/8's execution metrics (execution_metrics.hpp), counted by the processors and
    // written by the heartbeat; null in tests that need none.
    ExecutionMetrics* execution_metrics = nullptr;
};

}  // namespace kiqd
