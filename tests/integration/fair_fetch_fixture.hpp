#pragma once
// What the fair fetch tests share (fair_fetch_test.cpp): jobs as a Ruby client that knows
// nothing of tenants writes them, a fair fetch over one queue, and readers of what came out as
// "tenant/n" labels. Test threads only.
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "fetch/fair_fetch.hpp"
#include "fetch/fetcher.hpp"
#include "support/redis_reads.hpp"

namespace kiqd::test::fair_fixture {

using kiqd::test::llen;
using kiqd::test::lrange;

inline const std::string kIdentity = "fairhost:1:0123456789ab";

// A job of `tenant` (args[0]) numbered `n` (args[1]), enqueued at `at`, as a Ruby client
// that knows nothing of tenants writes it.
inline std::string job(const std::string& tenant, int n, double at = 1700000000.0) {
    nlohmann::ordered_json j{{"class", "Kiqd::Noop"}, {"args", {tenant, n}},
                             {"queue", "default"},    {"jid", tenant + std::to_string(n)},
                             {"retry", true},         {"created_at", at},
                             {"enqueued_at", at}};
    return j.dump();
}

// "tenant/n" of a fetched payload.
inline std::string label(const std::string& payload) {
    auto j = nlohmann::json::parse(payload);
    return j["args"][0].get<std::string>() + "/" + std::to_string(j["args"][1].get<int>());
}

struct FairSetup {
    explicit FairSetup(std::vector<QueueWeight> queues, FairFetchConfig fair)
        : config(std::move(fair)), order(std::move(queues)) {}
    FairFetchConfig config;
    Keys keys;
    QueueOrder order;
    std::unique_ptr<FairFetch> fair() const {
        return std::make_unique<FairFetch>(keys, order, config);
    }
};

inline FairFetchConfig fair_default(std::map<std::string, int> weights = {},
                                    int max_tenants = 10000) {
    FairFetchConfig c;
    FairFetchQueue q;
    q.queue = "default";
    q.arg = 0;
    q.weights = std::move(weights);
    q.max_tenants = max_tenants;
    c.queues.push_back(q);
    return c;
}

// Sidekiq::Queue.all.sum(&:size): every queue in `queues`, summed.
inline long long sidekiq_total(redis::Connection& c) {
    auto members = c.command({"SMEMBERS", "queues"});
    long long total = 0;
    for (size_t i = 0; i < members.size(); ++i)
        total += llen(c, "queue:" + std::string(members[i].str()));
    return total;
}

inline std::vector<std::string> fetch_labels(const Fetcher& f, redis::Connection& c, int n) {
    std::mt19937_64 rng(7);
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) {
        auto unit = f.retrieve_work(c, rng, 0);
        if (!unit) break;
        out.push_back(label(unit->payload));
    }
    return out;
}

// "tenant/n" of each job in a working list, oldest fetched first.
inline std::vector<std::string> working_labels(redis::Connection& c, const std::string& working) {
    std::vector<std::string> out;
    auto in_work = lrange(c, working);
    for (auto it = in_work.rbegin(); it != in_work.rend(); ++it) out.push_back(label(*it));
    return out;
}

}  // namespace kiqd::test::fair_fixture
