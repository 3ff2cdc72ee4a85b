#include "server/process_metrics.hpp"

#include <dirent.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "server/prometheus_text.hpp"

namespace kiqd {
namespace {

// Seconds since the epoch at which this process started: its start in clock ticks after boot
// (/proc/self/stat field 22) plus the boot time (/proc/stat btime).
double start_time_seconds() {
    std::ifstream stat("/proc/self/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t paren = text.rfind(')');  // the command name may hold spaces and parentheses
    if (paren == std::string::npos) return 0;
    std::istringstream fields(text.substr(paren + 2));
    std::string field;
    // After ") " come field 3 (state) onwards; starttime is field 22.
    for (int i = 3; i < 22 && fields >> field;) ++i;
    unsigned long long ticks = 0;
    if (!(fields >> ticks)) return 0;
    std::ifstream proc_stat("/proc/stat");
    for (std::string key; proc_stat >> key;) {
        if (key == "btime") {
            double boot = 0;
            proc_stat >> boot;
            return boot + static_cast<double>(ticks) / static_cast<double>(::sysconf(_SC_CLK_TCK));
        }
        proc_stat.ignore(1 << 20, '\n');
    }
    return 0;
}

size_t open_fds() {
    size_t n = 0;
    if (DIR* dir = ::opendir("/proc/self/fd")) {
        while (const dirent* e = ::readdir(dir))
            if (e->d_name[0] != '.') ++n;
        ::closedir(dir);
        if (n > 0) --n;  // the directory's own descriptor
    }
    return n;
}

}  // namespace

void render_process_metrics(std::string& out) {
    static const double started = start_time_seconds();  // it never changes: read /proc once
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    const double cpu = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                       static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
    append_metric(out, "process_cpu_seconds_total", "counter",
                  "Total user and system CPU time spent in seconds.", cpu);
    unsigned long long pages_virtual = 0, pages_resident = 0;
    std::ifstream statm("/proc/self/statm");
    statm >> pages_virtual >> pages_resident;
    const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
    append_metric(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
                  static_cast<double>(pages_resident) * page);
    append_metric(out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
                  static_cast<double>(pages_virtual) * page);
    append_metric(out, "process_start_time_seconds", "gauge",
                  "Start time of the process since unix epoch in seconds.", started);
    append_metric(out, "process_open_fds", "gauge", "Number of open file descriptors.",
                  static_cast<double>(open_fds()));
    rlimit files{};
    ::getrlimit(RLIMIT_NOFILE, &files);
    append_metric(out, "process_max_fds", "gauge", "Maximum number of open file descriptors.",
                  files.rlim_cur == RLIM_INFINITY ? -1.0 : static_cast<double>(files.rlim_cur));
    out += fmt::format(
        "# HELP kiqd_build_info The kiqd version of this process (value 1).\n"
        "# TYPE kiqd_build_info gauge\nkiqd_build_info{{version=\"{}\"}} 1\n",
        KIQD_VERSION);
}

}  // namespace kiqd
