// chaos_job: the job bench/chaos.sh runs through `exec:` handlers. It records its run in an
// append-only ledger and does what its arguments say:
//
//   exec: [chaos_job]        (payload on stdin, as kiqd's exec handler gives it)
//   args: [work_ms, mode, ...]   mode "fail_once": fails on its first attempt (no retry_count)
//
// The ledger is the file $CHAOS_LEDGER, opened with O_APPEND: one JSON line per event, written
// with one write(2) (shorter than PIPE_BUF, so lines of concurrent jobs never interleave):
//   {"ev":"start"|"end"|"fail","jid":…,"class":…,"proc":$CHAOS_PROC,"pid":…,
//    "mono":CLOCK_MONOTONIC ns,"wall":CLOCK_REALTIME µs,"retry":$KIQD_RETRY_COUNT,"args":[…]}
// A run killed before its end (kill -9 of kiqd, a shutdown's SIGTERM) has a start and no end.
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

namespace {

std::string env_or(const char* name, const char* fallback) {
    const char* v = std::getenv(name);
    return v ? v : fallback;
}

long long clock_ns(clockid_t clock) {
    timespec ts{};
    clock_gettime(clock, &ts);
    return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

void record(int fd, const char* event, const nlohmann::json& args) {
    const std::string retry = env_or("KIQD_RETRY_COUNT", "");
    nlohmann::json line{{"ev", event},
                        {"jid", env_or("KIQD_JID", "")},
                        {"class", env_or("KIQD_CLASS", "")},
                        {"proc", env_or("CHAOS_PROC", "?")},
                        {"pid", static_cast<int>(getpid())},
                        {"mono", clock_ns(CLOCK_MONOTONIC)},
                        {"wall", clock_ns(CLOCK_REALTIME) / 1000},
                        {"retry", retry.empty() ? -1 : std::atoi(retry.c_str())},
                        {"args", args}};
    const std::string text = line.dump() + "\n";
    if (write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) std::exit(3);
}

}  // namespace

int main() {
    const std::string ledger = env_or("CHAOS_LEDGER", "");
    if (ledger.empty()) {
        std::fprintf(stderr, "chaos_job: CHAOS_LEDGER is not set\n");
        return 2;
    }
    const int fd = open(ledger.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        std::perror("chaos_job: ledger");
        return 2;
    }
    const std::string payload((std::istreambuf_iterator<char>(std::cin)),
                              std::istreambuf_iterator<char>());
    nlohmann::json args = nlohmann::json::array();
    try {
        auto job = nlohmann::json::parse(payload);
        if (job.contains("args") && job["args"].is_array()) args = job["args"];
    } catch (const std::exception& e) {
        std::fprintf(stderr, "chaos_job: payload: %s\n", e.what());
        return 2;
    }
    record(fd, "start", args);
    const long work_ms = !args.empty() && args[0].is_number() ? args[0].get<long>() : 0;
    if (work_ms > 0) {
        timespec ts{work_ms / 1000, (work_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0) {
        }
    }
    const bool fail_once = args.size() > 1 && args[1] == "fail_once";
    if (fail_once && env_or("KIQD_RETRY_COUNT", "").empty()) {
        record(fd, "fail", args);
        std::fprintf(stderr, "chaos_job: first attempt fails on purpose\n");
        return 1;
    }
    record(fd, "end", args);
    return 0;
}
