#pragma once
// The standard process_* metrics every Prometheus client library exports (start time, CPU,
// resident and virtual memory, open and maximum descriptors), read from /proc and getrlimit at
// scrape time, and kiqd_build_info. Called on the metrics server's thread.
#include <string>

namespace kiqd {

void render_process_metrics(std::string& out);

}  // namespace kiqd
