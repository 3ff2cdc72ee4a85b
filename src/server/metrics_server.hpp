#pragma once
// MetricsServer: a small HTTP/1.1 server (Boost.Beast) on its own thread with its own
// io_context and its own Redis connection, enabled by `metrics: {listen: "host:port"}`:
//   GET /metrics  Prometheus text format 0.0.4: the JobMetrics series, kiqd_busy_threads,
//                 kiqd_threads, kiqd_cpu_bound_running / _held, and per queue of this process
//                 kiqd_queue_size and kiqd_queue_latency_seconds read from Redis at scrape time
//                 (LLEN and the oldest job's enqueued_at, as Sidekiq's Queue#latency), plus
//                 kiqd_redis_up, and Redis's maxmemory-policy (kiqd_redis_maxmemory_policy{policy},
//                 kiqd_redis_noeviction: eviction_policy.hpp).
//   GET /healthz  200 "ok" when Redis answers PING and every processor thread is alive (or the
//                 process is quiet: "quiet"); 503 with the reason otherwise.
// Requests are served one at a time (a scrape is cheap); how each is read and answered is
// metrics_http.hpp's (a request that cannot be read gets 400, 413 or 431 and the connection
// closes). The endpoint never costs kiqd more than
// a bounded number of descriptors: at most 64 connections at once (more wait in the listen
// backlog), 5 s to send a request, 10 s idle between keep-alive requests, and accept() failures
// for lack of descriptors are retried with backoff (metrics_server.cpp has the numbers).
// Every socket it opens is close-on-exec from its first instant.
// start() binds on the caller's thread (so a bad address fails startup) and then runs the
// thread; stop() closes the acceptor and joins. Only the server thread touches its connection.
#include <spdlog/logger.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "kiqd/config.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"
#include "middleware/job_metrics.hpp"
#include "server/metrics_answer.hpp"
#include "server/work_state.hpp"

namespace kiqd {

class MetricsServer {
  public:
    struct Sources {
        const JobMetrics& jobs;
        const WorkState& work;
        const Keys& keys;
        std::vector<std::string> queues;                 // this process's queues
        redis::ConnectionOptions redis;                  // for queue sizes and /healthz
        std::function<size_t()> threads_alive;           // processor threads running now
        std::function<bool()> quiet;                     // the process is quiet or stopping
        std::function<std::pair<size_t, size_t>()> cpu;  // cpu-bound (running, held)
        std::vector<std::string> fair_queues = {};       // fair_fetch queues (fair_metrics.hpp)
    };
    MetricsServer(const MetricsConfig& config, Sources sources, spdlog::logger& log);
    ~MetricsServer();

    // Binds and starts the thread. Throws std::runtime_error naming the address on failure.
    void start();
    void stop() noexcept;                      // idempotent
    int port() const { return port_.load(); }  // the bound port (useful with port 0)

    // The answer to a GET of `target` (status, content type, body). Public for tests and the
    // fuzz target. Server thread only (it uses the server's Redis connection).
    using Response = metrics_http::Answer;
    Response handle(const std::string& target);

    struct Impl;  // the server thread's acceptor, sessions and timers (metrics_server.cpp)

  private:
    std::string render_metrics();
    // The cluster-wide gauges: set sizes, live processes and their busy jobs.
    std::string render_cluster(long long retry, long long scheduled, long long dead,
                               const redis::Reply& members);
    MetricsConfig config_;
    Sources sources_;
    spdlog::logger& log_;
    redis::Connection conn_;  // server thread only
    std::unique_ptr<Impl> impl_;
    std::thread thread_;
    std::atomic<int> port_{0};
};

}  // namespace kiqd
