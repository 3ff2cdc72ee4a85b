#include <map>

#include "kiqd/fetcher.hpp"

namespace kiqd {

std::optional<UnitOfWork> BasicFetcher::retrieve_work(redis::Connection& conn,
                                                      std::mt19937_64& rng, size_t) const {
    thread_local std::vector<const std::string*> names;
    thread_local std::vector<std::string> argv_storage;
    order_.order(rng, names);
    argv_storage.clear();
    argv_storage.push_back("BRPOP");
    for (const auto* n : names) argv_storage.push_back(keys_.queue(*n));
    argv_storage.push_back(std::to_string(kTimeoutSeconds));
    auto reply = conn.command(argv_storage);
    if (reply.is_nil()) return std::nullopt;
    if (reply.size() != 2) throw redis::ProtocolError("BRPOP returned an unexpected reply");
    return UnitOfWork{std::string(keys_.queue_name(reply[0].str())), std::string(reply[1].str())};
}

std::vector<redis::Command> BasicFetcher::requeue_commands(
    const std::vector<UnitOfWork>& units) const {
    std::map<std::string, redis::Command> by_queue;
    for (const auto& u : units) {
        auto& cmd = by_queue[u.queue];
        if (cmd.empty()) cmd = {"RPUSH", keys_.queue(u.queue)};
        cmd.push_back(u.payload);
    }
    std::vector<redis::Command> out;
    for (auto& [q, cmd] : by_queue) out.push_back(std::move(cmd));
    return out;
}

}  // namespace kiqd
