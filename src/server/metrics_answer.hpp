#pragma once
// What the metrics endpoint answers to a path: status, content type and body. Apart from
// metrics_http.hpp (the HTTP side, on Boost.Beast) so that MetricsServer's users, the Launcher
// among them, do not compile Beast.
#include <string>

namespace kiqd::metrics_http {

struct Answer {
    int status;
    std::string content_type;
    std::string body;
};

}  // namespace kiqd::metrics_http
