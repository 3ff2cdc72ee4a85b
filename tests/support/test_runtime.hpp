#pragma once
// TestRuntime: a complete kiqd Runtime against a test Redis, for driving Processor, Scheduler
// and Manager directly in-process (no daemon), as Sidekiq's own tests call the processor.
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <memory>

#include "fetch/reliable_fetcher.hpp"
#include "server/runtime.hpp"
#include "support/redis_server.hpp"

namespace kiqd::test {

struct TestRuntime {
    static constexpr const char* kIdentity = "testhost:1:abcdef012345";
    // Reliable fetch's working list of queue `default` in this process (kIdentity).
    static constexpr const char* kWorkingDefault = "queue:sq|testhost:1:abcdef012345|default";

    explicit TestRuntime(const RedisServer& server,
                         std::vector<QueueWeight> queues = {{"default", 0}}, int concurrency = 2,
                         FetchMode fetch = FetchMode::basic, int batch = 0)
        : config(make_config(server, std::move(queues), concurrency, fetch, batch)),
          order(config.queues),
          fetcher_owner(fetch == FetchMode::reliable
                            ? std::unique_ptr<Fetcher>(new ReliableFetcher(
                                  keys, order, kIdentity,
                                  static_cast<size_t>(config.reliable_fetch.batch_size)))
                            : std::unique_ptr<Fetcher>(new BasicFetcher(
                                  keys, order, static_cast<size_t>(config.prefetch)))),
          fetcher(*fetcher_owner),
          dead(keys, config.dead_max_jobs, config.dead_timeout_seconds, config.compat),
          retry(config.compat, config.max_retries, keys, dead),
          work(static_cast<size_t>(concurrency)),
          log_sink(std::make_shared<spdlog::sinks::ostream_sink_mt>(log_stream)),
          log(std::make_shared<spdlog::logger>("test", log_sink)),
          health(*log),
          rt{config, keys, kIdentity, *log, server.options(), fetcher, handlers,
             chain,  dead, retry,     work, lifecycle,        health,  JobLimits{}} {
        register_builtin_handlers(handlers);
        log->set_level(spdlog::level::debug);
    }
    // `batch` > 0: reliable_fetch.batch_size (reliable) or prefetch (basic); 0: the defaults.
    static Config make_config(const RedisServer& server, std::vector<QueueWeight> queues,
                              int concurrency, FetchMode fetch, int batch) {
        Config c;
        c.fetch = fetch;
        if (batch > 0)
            (fetch == FetchMode::reliable ? c.reliable_fetch.batch_size : c.prefetch) = batch;
        c.queues = std::move(queues);
        c.concurrency = concurrency;
        c.redis.url = server.url();
        return c;
    }
    std::string logs() {
        log->flush();
        return log_stream.str();
    }

    Config config;
    Keys keys;
    QueueOrder order;
    std::unique_ptr<Fetcher> fetcher_owner;
    Fetcher& fetcher;
    // The reliable fetcher, when built with FetchMode::reliable (already marked ready).
    const ReliableFetcher* reliable() const {
        auto* r = dynamic_cast<const ReliableFetcher*>(fetcher_owner.get());
        if (r) r->set_ready();
        return r;
    }
    DeadSet dead;
    JobRetry retry;
    WorkState work;
    Lifecycle lifecycle;
    HandlerRegistry handlers;
    MiddlewareChain chain;
    std::ostringstream log_stream;
    std::shared_ptr<spdlog::sinks::ostream_sink_mt> log_sink;
    std::shared_ptr<spdlog::logger> log;
    RedisHealth health;
    Runtime rt;
};

}  // namespace kiqd::test
