// `kiqd top` (see top.hpp).
#include "admin/top.hpp"

#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <csignal>
#include <optional>
#include <sstream>

#include "admin/table.hpp"
#include "common/control_escape.hpp"

namespace kiqd::admin {
namespace {

volatile std::sig_atomic_t g_quit = 0;
volatile std::sig_atomic_t g_resized = 0;

extern "C" void on_quit_signal(int) {
    g_quit = 1;
}
extern "C" void on_resize(int) {
    g_resized = 1;
}

// `line` (escaped text) cut to `width` terminal columns, never inside a UTF-8 sequence.
std::string fit(const std::string& line, size_t width) {
    if (width == 0) return line;
    size_t cols = 0;
    for (size_t i = 0; i < line.size();) {
        char32_t cp = 0;
        const size_t n = std::max<size_t>(1, utf8_sequence(line, i, cp));
        const size_t w = display_width(std::string_view(line).substr(i, n));
        if (cols + w > width) return line.substr(0, i);
        cols += w;
        i += n;
    }
    return line;
}

void add_table(std::vector<std::string>& lines, const std::vector<std::string>& header,
               const std::vector<std::vector<std::string>>& rows) {
    std::ostringstream s;
    print_table(s, header, rows);
    std::string line;
    std::istringstream in(s.str());
    while (std::getline(in, line)) lines.push_back(line);
}

std::string rate(long long now, long long before, double seconds) {
    if (!(seconds > 0)) return "-";
    return fixed(static_cast<double>(now - before) / seconds, 1) + "/s";
}

// The terminal's size; 80x24 when it does not say.
void terminal_size(size_t& width, size_t& height) {
    winsize ws{};
    if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
        width = ws.ws_col;
        height = ws.ws_row;
    } else {
        width = 80;
        height = 24;
    }
}

// The terminal in the dashboard's mode for the lifetime of the object: no echo, no line
// buffering (so q arrives at once), signals kept (Ctrl-C is SIGINT), alternate screen, no
// cursor; restored however the loop ends.
class TerminalMode {
  public:
    explicit TerminalMode(std::ostream& out) : out_(out) {
        saved_ok_ = ::tcgetattr(STDIN_FILENO, &saved_) == 0;
        if (saved_ok_) {
            termios raw = saved_;
            raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
            raw.c_cc[VMIN] = 1;
            raw.c_cc[VTIME] = 0;
            ::tcsetattr(STDIN_FILENO, TCSANOW, &raw);
        }
        struct sigaction sa {};
        sa.sa_handler = on_quit_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = 0;  // no SA_RESTART: poll() returns EINTR and the loop looks at the flags
        ::sigaction(SIGINT, &sa, &old_int_);
        ::sigaction(SIGTERM, &sa, &old_term_);
        sa.sa_handler = on_resize;
        ::sigaction(SIGWINCH, &sa, &old_winch_);
        out_ << "\x1b[?1049h\x1b[?25l" << std::flush;
    }
    ~TerminalMode() {
        out_ << "\x1b[?25h\x1b[?1049l" << std::flush;
        if (saved_ok_) ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
        ::sigaction(SIGINT, &old_int_, nullptr);
        ::sigaction(SIGTERM, &old_term_, nullptr);
        ::sigaction(SIGWINCH, &old_winch_, nullptr);
    }
    TerminalMode(const TerminalMode&) = delete;
    TerminalMode& operator=(const TerminalMode&) = delete;

  private:
    std::ostream& out_;
    termios saved_{};
    bool saved_ok_ = false;
    struct sigaction old_int_ {
    }, old_term_{}, old_winch_{};
};

void draw(std::ostream& out, const std::vector<std::string>& lines) {
    // No line break after the last line: on the bottom row it would scroll the frame up.
    std::string frame = "\x1b[H";
    for (size_t i = 0; i < lines.size(); ++i) frame += (i ? "\r\n" : "") + lines[i] + "\x1b[K";
    frame += "\x1b[J";
    out << frame << std::flush;
}

}  // namespace

TopSample take_top_sample(redis::Connection& conn, const Keys& keys) {
    TopSample s;
    s.time = epoch_seconds();
    // Queues and processes once: the totals and the busy jobs are derived from them.
    s.queues = fetch_queues(conn, keys);
    s.processes = fetch_processes(conn, keys);
    s.stats = fetch_stats(conn, keys, s.queues, s.processes);
    s.busy = fetch_busy(conn, keys, s.processes);
    return s;
}

std::vector<std::string> top_frame(const TopSample& now, const TopSample* previous,
                                   const Request& r, size_t width, size_t height,
                                   const std::string& status) {
    std::vector<std::string> lines;
    const double dt = previous ? now.time - previous->time : 0.0;
    const Stats& s = now.stats;
    lines.push_back(escape_control("kiqd top  Redis " + r.redis_endpoint + " (" + r.redis_source +
                                   ")  " + utc_time(now.time)));
    lines.push_back("processed " + std::to_string(s.processed) + " (" +
                    (previous ? rate(s.processed, previous->stats.processed, dt) : "-") +
                    ")  failed " + std::to_string(s.failed) + " (" +
                    (previous ? rate(s.failed, previous->stats.failed, dt) : "-") + ")  busy " +
                    std::to_string(s.busy) + "  enqueued " + std::to_string(s.enqueued) +
                    "  scheduled " + std::to_string(s.scheduled) + "  retries " +
                    std::to_string(s.retries) + "  dead " + std::to_string(s.dead) +
                    "  processes " + std::to_string(s.processes));
    lines.push_back("");
    std::vector<std::vector<std::string>> rows;
    for (const auto& p : now.processes)
        rows.push_back({p.identity, p.tag,
                        std::to_string(p.busy) + "/" + std::to_string(p.concurrency),
                        fixed(p.rss_kb / 1024.0, 1) + " MB",
                        human_duration(now.time - p.beat) + " ago", p.quiet ? "yes" : "no"});
    std::vector<std::string> headers{"PROCESS", "TAG", "BUSY", "RSS", "LAST BEAT", "QUIET"};
    add_capsules_column(now.processes, 3, headers, rows);
    add_table(lines, headers, rows);
    lines.push_back("");
    rows.clear();
    for (const auto& q : now.queues)
        rows.push_back({q.name, std::to_string(q.size), fixed(q.latency, 2) + " s"});
    add_table(lines, {"QUEUE", "SIZE", "LATENCY"}, rows);
    lines.push_back("");
    rows.clear();
    for (const auto& b : now.busy)
        rows.push_back({b.identity, b.job.jid, b.job.job_class,
                        b.queue.empty() ? b.job.queue : b.queue,
                        human_duration(now.time - b.run_at), shorten(b.job.args, 40)});
    add_table(lines, {"BUSY ON", "JID", "CLASS", "QUEUE", "RUNNING", "ARGS"}, rows);
    if (!status.empty()) lines.push_back(escape_control(status));
    if (height > 0 && lines.size() > height) {
        lines.resize(height);
        lines.back() = "... (a taller terminal shows more)";
    }
    for (auto& l : lines) l = fit(l, width);
    return lines;
}

int run_top(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out) {
    if (!::isatty(STDOUT_FILENO) || !::isatty(STDIN_FILENO)) {
        // Not a terminal: one frame, plain text (lines end in \n, no escape sequences).
        const TopSample sample = take_top_sample(conn, keys);
        for (const auto& l : top_frame(sample, nullptr, r, 0, 0, "")) out << l << "\n";
        out << std::flush;
        return 0;
    }
    g_quit = 0;
    g_resized = 0;
    TerminalMode mode(out);
    std::optional<TopSample> previous, current;
    std::string status;
    const int interval_ms = static_cast<int>(r.interval * 1000);
    for (;;) {
        try {
            TopSample next = take_top_sample(conn, keys);
            if (current) previous = std::move(current);
            current = std::move(next);
            status.clear();
        } catch (const redis::Error& e) {
            status = std::string("Redis: ") + e.what() + " (retrying)";
        }
        // Redrawn until the next sample is due; a resize redraws from the same sample.
        const auto due = epoch_seconds() + interval_ms / 1000.0;
        for (;;) {
            size_t width = 0, height = 0;
            terminal_size(width, height);
            if (current)
                draw(out, top_frame(*current, previous ? &*previous : nullptr, r, width, height,
                                    status + (status.empty() ? "" : "  ") + "q quits"));
            else
                draw(out, {fit(escape_control(status), width)});
            g_resized = 0;
            const int wait_ms = static_cast<int>((due - epoch_seconds()) * 1000);
            if (wait_ms <= 0) break;
            pollfd p{STDIN_FILENO, POLLIN, 0};
            const int ready = ::poll(&p, 1, wait_ms);
            if (g_quit) return 0;
            if (ready > 0) {
                char c = 0;
                if (::read(STDIN_FILENO, &c, 1) != 1) return 0;  // stdin closed
                if (c == 'q' || c == 'Q') return 0;
                continue;  // another key: redraw
            }
            if (ready == 0) break;  // time for the next sample
            // EINTR: a resize (redraw) or another signal.
        }
        if (g_quit) return 0;
    }
}

}  // namespace kiqd::admin
