#include "support/job_pushes.hpp"

#include <algorithm>

#include "kiqd/client.hpp"

namespace kiqd::test {

void push_raw(redis::Connection& c, const std::string& queue,
              const std::vector<std::string>& raws) {
    c.command({"SADD", "queues", queue});
    for (size_t i = 0; i < raws.size(); i += 500) {
        redis::Command lpush{"LPUSH", "queue:" + queue};
        for (size_t j = i; j < std::min(raws.size(), i + 500); ++j) lpush.push_back(raws[j]);
        c.command(lpush);
    }
}

std::vector<std::string> push_jobs(redis::Connection& c, int n,
                                   const std::function<nlohmann::ordered_json(int)>& job) {
    const Client client(Keys{}, Compat::v6);
    std::vector<std::string> jids;
    std::vector<nlohmann::ordered_json> batch;
    for (int i = 0; i < n; ++i) {
        batch.push_back(job(i));
        if (batch.size() == 1000 || i == n - 1) {
            auto pushed = client.push_bulk(c, std::move(batch));
            jids.insert(jids.end(), pushed.begin(), pushed.end());
            batch.clear();
        }
    }
    return jids;
}

std::vector<std::string> push_copies(redis::Connection& c, const nlohmann::ordered_json& job,
                                     int n) {
    return push_jobs(c, n, [&](int) { return job; });
}

std::string noop_payload(const std::string& jid) {
    return R"({"class":"Kiqd::Noop","args":[],"queue":"default","jid":")" + jid +
           R"(","retry":true})";
}

}  // namespace kiqd::test
