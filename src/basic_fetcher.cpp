#include <chrono>
#include <map>
#include <thread>

#include "kiqd/fetcher.hpp"

namespace kiqd {

redis::Reply command_after(redis::Connection& conn, std::vector<redis::Command>& pending,
                           const redis::Command& command) {
    if (pending.empty()) return conn.command(command);
    pending.push_back(command);
    std::vector<redis::Reply> replies;
    try {
        replies = conn.pipeline_unchecked(pending);
    } catch (...) {
        // Keep only the after-job commands for the next try: a fetch command left in `pending`
        // would be sent again next time and its popped job dropped with its unread reply.
        pending.pop_back();
        throw;
    }
    pending.clear();
    redis::Reply reply = std::move(replies.back());
    if (reply.is_error()) throw redis::ReplyError(std::string(reply.error_text()));
    return reply;
}

std::optional<UnitOfWork> wait_all_paused(redis::Connection& conn,
                                          std::vector<redis::Command>& pending, int seconds) {
    // Nothing to block on in Redis: send what is pending and wait here, as Sidekiq Pro's fetch
    // sleeps when every queue is paused. A quarter of the fetch timeout, so that a resumed queue
    // is fetched from again soon after the pause controller has seen it.
    if (!pending.empty()) {
        conn.pipeline_unchecked(pending);
        pending.clear();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(seconds * 250));
    return std::nullopt;
}

std::optional<UnitOfWork> BasicFetcher::retrieve_work(redis::Connection& conn, std::mt19937_64& rng,
                                                      size_t,
                                                      std::vector<redis::Command>& pending) const {
    thread_local std::vector<const std::string*> names;
    thread_local std::vector<std::string> argv_storage;
    order_.order(rng, names);
    if (names.empty()) return wait_all_paused(conn, pending, kTimeoutSeconds);
    argv_storage.clear();
    argv_storage.push_back("BRPOP");
    for (const auto* n : names) argv_storage.push_back(keys_.queue(*n));
    argv_storage.push_back(std::to_string(kTimeoutSeconds));
    auto reply = command_after(conn, pending, argv_storage);
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
