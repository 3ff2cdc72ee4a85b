// ClusterCompat: the Sidekiq major presented under `compat: auto` (see cluster_compat.hpp).
#include "server/cluster_compat.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

namespace kiqd {
namespace {

// Another process's info JSON is input: one larger than this is not read (a Sidekiq one is a
// few hundred bytes).
constexpr size_t kMaxInfoBytes = 64 * 1024;

}  // namespace

std::optional<int> sidekiq_major_of_info(std::string_view info_json) {
    if (info_json.size() > kMaxInfoBytes) return std::nullopt;
    const auto info = nlohmann::json::parse(info_json, nullptr, false);
    if (!info.is_object()) return std::nullopt;
    const auto v = info.find("version");
    if (v == info.end() || v->is_null()) return 6;  // 6.x and older write no version
    if (!v->is_string()) return std::nullopt;
    const std::string& s = v->get_ref<const std::string&>();
    // "<major>.<minor>…" with a major of one or two digits; anything else ("kiqd-0.1.0") is not
    // a Sidekiq version.
    size_t i = 0;
    int major = 0;
    while (i < s.size() && i < 2 && s[i] >= '0' && s[i] <= '9') major = major * 10 + (s[i++] - '0');
    if (i == 0 || i >= s.size() || s[i] != '.') return std::nullopt;
    return major;
}

ClusterCompat::Decision ClusterCompat::fixed(Compat compat) {
    Decision d;
    d.major = static_cast<int>(compat);
    d.metrics.v7 = compat == Compat::v7;
    d.metrics.v8 = compat == Compat::v8;
    return d;
}

ClusterCompat::Decision ClusterCompat::from_majors(const std::multiset<int>& majors) {
    Decision d;
    for (int m : majors) {
        // Older than 6 presents nothing new; newer than 8 is taken for 8, the newest known.
        const int known = std::clamp(m, 6, 8);
        d.major = std::max(d.major, known);
        if (known == 7) d.metrics.v7 = true;
        if (known == 8) d.metrics.v8 = true;
    }
    // Alone, or beside 6.x processes only: the app's Web UI may still be 7 or 8, and nothing
    // here says which; both layouts, a few commands per beat, so either shows kiqd's jobs.
    if (!d.metrics.any()) d.metrics.v7 = d.metrics.v8 = true;
    return d;
}

ClusterCompat::ClusterCompat(const Config& config)
    : automatic_(config.compat_auto),
      decision_(config.compat_auto ? from_majors({}) : fixed(config.compat)) {}

std::optional<std::string> ClusterCompat::refresh(redis::Connection& conn, const Keys& keys,
                                                  const std::string& self_identity) {
    if (!automatic_) return std::nullopt;
    auto members = conn.command({"SMEMBERS", keys.processes()});
    std::map<std::string, std::optional<int>> live;
    std::vector<std::string> unread;
    for (size_t i = 0; i < members.size(); ++i) {
        std::string id(members[i].str());
        if (id == self_identity) continue;
        if (auto it = members_.find(id); it != members_.end())
            live.emplace(id, it->second);
        else
            unread.push_back(std::move(id));
    }
    if (!unread.empty()) {
        std::vector<redis::Command> cmds;
        cmds.reserve(unread.size());
        for (const auto& id : unread) cmds.push_back({"HGET", keys.process(id), "info"});
        const auto replies = conn.pipeline_unchecked(cmds);
        for (size_t i = 0; i < unread.size(); ++i) {
            // No record (it expired; ProcessSet prunes such members lazily): ask again next time,
            // in case it comes back after an outage under the same identity.
            if (!replies[i].is_string()) continue;
            live.emplace(unread[i], sidekiq_major_of_info(replies[i].str()));
        }
    }
    members_ = std::move(live);
    const Decision next = from_majors(majors());
    if (decided_once_ && next == decision_) return std::nullopt;
    decided_once_ = true;
    decision_ = next;
    return describe();
}

std::multiset<int> ClusterCompat::majors() const {
    std::multiset<int> out;
    for (const auto& [id, major] : members_)
        if (major) out.insert(*major);
    return out;
}

std::string ClusterCompat::describe() const {
    if (!automatic_)
        return fmt::format("compat {}: presenting as Sidekiq {}", decision_.major, decision_.major);
    std::map<int, size_t> processes_by_major;
    for (const int m : majors()) ++processes_by_major[m];
    std::string seen;
    for (const auto& [m, n] : processes_by_major)
        seen += fmt::format("{}{} Sidekiq {} process{}", seen.empty() ? "" : ", ", n, m,
                            n == 1 ? "" : "es");
    std::string metrics;
    if (decision_.metrics.v7 && decision_.metrics.v8)
        metrics = "execution metrics in the layouts of 7 and 8";
    else if (decision_.metrics.any())
        metrics =
            fmt::format("execution metrics in the layout of {}", decision_.metrics.v8 ? 8 : 7);
    else
        metrics = "no execution metrics";
    return fmt::format("compat auto: {}; presenting as Sidekiq {} ({})",
                       seen.empty() ? "no other Sidekiq process in the cluster" : seen,
                       decision_.major, metrics);
}

}  // namespace kiqd
