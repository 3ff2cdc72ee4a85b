#include "server/process_identity.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>

#include "kiqd/clock.hpp"

namespace kiqd {

std::string encode_host_name(std::string_view raw) {
    constexpr size_t kMaxName = 255;
    if (raw.size() > kMaxName) raw = raw.substr(0, kMaxName);
    if (raw.empty()) return "localhost";
    static constexpr char kHex[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(raw.size());
    for (const unsigned char c : raw) {
        const bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                           (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
        if (plain) {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += kHex[c >> 4];
            out += kHex[c & 15];
        }
    }
    return out;
}

ProcessIdentity ProcessIdentity::create() {
    ProcessIdentity p;
    // $DYNO or the host name are whatever the environment says: a '|' in them made a process
    // "recover" its own running job into a list no worker serves, a space made the unique-lock
    // reaper test the wrong owner. Encoded, they cannot be taken apart wrongly.
    if (const char* dyno = std::getenv("DYNO"); dyno && *dyno) {
        p.hostname = encode_host_name(dyno);
    } else {
        char buf[256] = {};
        gethostname(buf, sizeof buf - 1);
        p.hostname = encode_host_name(buf);
    }
    p.pid = static_cast<int>(getpid());
    std::mt19937_64 rng{std::random_device{}()};
    p.nonce = fmt::format("{:012x}", rng() & 0xffffffffffffULL);
    p.identity = fmt::format("{}:{}:{}", p.hostname, p.pid, p.nonce);
    p.started_at = epoch_seconds();
    return p;
}

std::string ProcessIdentity::info_json(const Config& config, const QueueOrder& queues) const {
    nlohmann::ordered_json info;
    info["hostname"] = hostname;
    info["started_at"] = started_at;
    info["pid"] = pid;
    info["tag"] = config.tag;
    info["concurrency"] = config.concurrency;
    info["queues"] = queues.names();
    info["labels"] = config.labels;
    info["identity"] = identity;
    // Compat 7 and 8 add weights, version and embedded; 8 adds capsules. compat: auto writes
    // them all: 6.4's readers pick the fields they know by name, so the extra ones are harmless
    // to a mixed cluster's tools (docs/sidekiq-compatibility.md#compat-auto).
    const bool all = config.compat_auto;
    nlohmann::ordered_json weights = nlohmann::ordered_json::object();
    for (const auto& q : config.queues) weights[q.name] = q.weight;
    if (all || config.compat != Compat::v6) {
        info["weights"] = nlohmann::ordered_json::array({weights});
        info["version"] = std::string("kiqd-") + KIQD_VERSION;
        info["embedded"] = false;
    }
    if (all || config.compat == Compat::v8) {
        // Sidekiq's Capsule#to_h: the mode is strict when no queue has a weight, random when
        // every weight is 1, weighted otherwise (lib/sidekiq/capsule.rb).
        const bool all_ones = std::all_of(config.queues.begin(), config.queues.end(),
                                          [](const QueueWeight& q) { return q.weight == 1; });
        info["capsules"] = {
            {"default",
             {{"concurrency", config.concurrency},
              {"mode", queues.strict() ? "strict" : (all_ones ? "random" : "weighted")},
              {"weights", weights}}}};
    }
    return info.dump();
}

long long current_rss_kb() {
    // Read with open(O_CLOEXEC), not std::ifstream (whose descriptor is inheritable): this runs
    // on the heartbeat thread while processor threads may be starting exec children.
    const int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        text.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    const auto at = text.find("\nVmRSS:");
    return at == std::string::npos ? 0 : std::atoll(text.c_str() + at + 7);
}

}  // namespace kiqd
