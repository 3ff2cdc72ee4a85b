#pragma once
// `kiqd top`: a live terminal dashboard of the cluster (what `asynq dash` and the Web UI's
// live view show): the counters with processed/failed per second, processes, queues with size
// and latency, and the busy jobs. Plain ANSI redraw (alternate screen, cursor home, erase),
// no curses: every frame is built from escaped text (control_escape.hpp) cut to the terminal's
// width and height, so nothing stored in Redis can reach the terminal as a control sequence.
// q or Ctrl-C quits and restores the terminal; a resize (SIGWINCH) redraws at once. When
// stdout or stdin is not a terminal it prints one frame, without escape sequences, and exits.
// Runs on the caller's thread; its signal handlers only set flags.
#include <ostream>
#include <string>
#include <vector>

#include "admin/request.hpp"
#include "admin/sidekiq_api.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd::admin {

int run_top(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out);

// One reading of the cluster.
struct TopSample {
    double time = 0.0;  // epoch seconds
    Stats stats;
    std::vector<QueueInfo> queues;
    std::vector<ProcessInfo> processes;
    std::vector<BusyJob> busy;
};
TopSample take_top_sample(redis::Connection& conn, const Keys& keys);

// The frame's lines, escaped and each at most `width` columns; at most `height` lines (0: no
// limits). `previous` (may be null) gives the per-second rates. `status`: a last line (an error).
std::vector<std::string> top_frame(const TopSample& now, const TopSample* previous,
                                   const Request& r, size_t width, size_t height,
                                   const std::string& status);

}  // namespace kiqd::admin
