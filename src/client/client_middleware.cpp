#include "kiqd/client_middleware.hpp"

namespace kiqd {

bool ClientMiddlewareChain::invoke(nlohmann::ordered_json& job, redis::Connection& redis) const {
    bool reached = false;
    invoke_from(0, job, redis, reached);
    return reached;
}

void ClientMiddlewareChain::invoke_from(size_t i, nlohmann::ordered_json& job,
                                        redis::Connection& redis, bool& reached) const {
    if (i == entries_.size()) {
        reached = true;
        return;
    }
    entries_[i]->call(job, redis, [&] { invoke_from(i + 1, job, redis, reached); });
}

std::vector<std::string> ClientMiddlewareChain::names() const {
    std::vector<std::string> out;
    for (const auto& e : entries_) out.emplace_back(e->name());
    return out;
}

}  // namespace kiqd
