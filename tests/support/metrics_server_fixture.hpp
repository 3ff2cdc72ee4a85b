#pragma once
// LoopbackMetricsServer: a started MetricsServer on 127.0.0.1 and a free port, serving queue
// "default" of `redis`, with the counters it reports (all zero) beside it. For tests that talk
// HTTP to the real endpoint. Header only; one test thread owns it.
#include <spdlog/spdlog.h>

#include <utility>

#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"
#include "middleware/job_metrics.hpp"
#include "server/metrics_server.hpp"
#include "server/work_state.hpp"

namespace kiqd::test {

struct LoopbackMetricsServer {
    LoopbackMetricsServer(const redis::ConnectionOptions& redis, spdlog::logger& log)
        : server(loopback(),
                 {jobs,
                  work,
                  keys,
                  {"default"},
                  redis,
                  [] { return size_t{1}; },
                  [] { return false; },
                  [] {
                      return std::pair<size_t, size_t>{0, 0};
                  }},
                 log) {
        server.start();
    }
    int port() const { return server.port(); }
    void stop() { server.stop(); }

    JobMetrics jobs;
    WorkState work{1};
    Keys keys;
    MetricsServer server;

  private:
    static MetricsConfig loopback() {
        MetricsConfig metrics;
        metrics.host = "127.0.0.1";
        metrics.port = 0;
        return metrics;
    }
};

}  // namespace kiqd::test
