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

namespace {

// One capsule's weights and mode as Sidekiq's Capsule#queues= sets them: a queue given without
// a weight has 0; the mode is strict when every weight is 0, random when every weight is 1,
// weighted otherwise (lib/sidekiq/capsule.rb).
struct CapsuleWeights {
    std::string name;
    int concurrency = 0;
    nlohmann::ordered_json weights = nlohmann::ordered_json::object();
    const char* mode = "strict";
};

CapsuleWeights capsule_weights(std::string name, int concurrency,
                               const std::vector<QueueWeight>& queues) {
    CapsuleWeights out{std::move(name), concurrency};
    bool all_zero = true, all_ones = true;
    for (const auto& q : queues) {
        out.weights[q.name] = q.weight;
        all_zero = all_zero && q.weight == 0;
        all_ones = all_ones && q.weight == 1;
    }
    out.mode = all_zero ? "strict" : all_ones ? "random" : "weighted";
    return out;
}

}  // namespace

std::vector<std::string> served_queue_names(const Config& config, const QueueOrder& order) {
    std::vector<std::string> out = order.names();
    for (const auto& cap : config.capsules)
        for (const auto& q : cap.queues)
            if (std::find(out.begin(), out.end(), q.name) == out.end()) out.push_back(q.name);
    return out;
}

std::string ProcessIdentity::info_json(const Config& config, const QueueOrder& queues) const {
    nlohmann::ordered_json info;
    info["hostname"] = hostname;
    info["started_at"] = started_at;
    info["pid"] = pid;
    info["tag"] = config.tag;
    // With capsules, as Sidekiq 7.3's Launcher#to_data: the total concurrency, every capsule's
    // queues once each in capsule order, one weights hash per capsule.
    info["concurrency"] = total_concurrency(config);
    info["queues"] = served_queue_names(config, queues);
    info["labels"] = config.labels;
    info["identity"] = identity;
    // Compat 7 and 8 add weights, version and embedded; 8 adds capsules. compat: auto writes
    // them all: 6.4's readers pick the fields they know by name, so the extra ones are harmless
    // to a mixed cluster's tools (docs/sidekiq-compatibility.md#compat-auto). With capsules
    // configured `capsules` is written in every mode (the only place their names appear).
    const bool all = config.compat_auto;
    std::vector<CapsuleWeights> capsules{
        capsule_weights("default", config.concurrency, config.queues)};
    for (const auto& cap : config.capsules)
        capsules.push_back(capsule_weights(cap.name, cap.concurrency, cap.queues));
    if (all || config.compat != Compat::v6) {
        nlohmann::ordered_json weights = nlohmann::ordered_json::array();
        for (const auto& c : capsules) weights.push_back(c.weights);
        info["weights"] = weights;
        info["version"] = std::string("kiqd-") + KIQD_VERSION;
        info["embedded"] = false;
    }
    if (all || config.compat == Compat::v8 || !config.capsules.empty()) {
        nlohmann::ordered_json caps = nlohmann::ordered_json::object();
        for (const auto& c : capsules)
            caps[c.name] = {
                {"concurrency", c.concurrency}, {"mode", c.mode}, {"weights", c.weights}};
        info["capsules"] = caps;
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
