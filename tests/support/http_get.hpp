#pragma once
// http_get: one plain HTTP/1.1 GET to 127.0.0.1, for tests that read kiqd's metrics endpoint.
#include <string>
#include <utility>

namespace kiqd::test {

// GET http://127.0.0.1:port/target → (status, body); status 0 when nothing answered.
std::pair<int, std::string> http_get(int port, const std::string& target);

// The config line that serves kiqd's /metrics and /healthz on 127.0.0.1:port.
inline std::string metrics_listen(int port) {
    return "metrics: {listen: \"127.0.0.1:" + std::to_string(port) + "\"}\n";
}

}  // namespace kiqd::test
