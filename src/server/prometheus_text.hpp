#pragma once
// append_metric: one Prometheus text-format series without labels ("# HELP", "# TYPE", the
// sample), shared by the metrics endpoint's own series (metrics_server.cpp) and the process_*
// metrics (process_metrics.cpp). Pure; any thread.
#include <fmt/format.h>

#include <string>
#include <string_view>

namespace kiqd {

inline void append_metric(std::string& out, std::string_view name, std::string_view type,
                          std::string_view help, double value) {
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name,
                   type, name, value);
}

}  // namespace kiqd
