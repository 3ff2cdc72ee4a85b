#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include "fetch/fair_fetch.hpp"
#include "fetch/fetch_buffer.hpp"
#include "fetch/fetch_combiner.hpp"
#include "fetch/fetcher.hpp"
#include "fetch/prefix_fetch.hpp"

namespace kiqd {
std::vector<UnitOfWork> batch_units(const redis::Reply& reply,
                                    const std::vector<std::string>& names) {
    std::vector<UnitOfWork> out;
    if (reply.is_nil()) return out;
    if (reply.size() % 2) reply.unexpected("fair fetch script: unexpected reply");
    out.reserve(reply.size() / 2);
    for (size_t i = 0; i < reply.size(); i += 2) {
        const long long index = reply[i].integer();
        const auto q = static_cast<size_t>(index < 0 ? -index : index);
        if (q < 1 || q > names.size()) reply.unexpected("fair fetch script: index out of range");
        out.push_back(UnitOfWork{names[q - 1], std::string(reply[i + 1].str()), index < 0});
    }
    return out;
}

void batch_order_args(const QueueOrder& order, std::mt19937_64& rng, size_t count,
                      std::vector<std::string>& args) {
    args.clear();
    args.push_back(std::to_string(count));
    args.push_back(std::to_string(order.names().size()));
    const std::string* first = order.names().data();
    thread_local std::vector<const std::string*> names;
    const size_t orders = order.strict() || order.names().size() == 1 ? 1 : count;
    for (size_t j = 0; j < orders; ++j) {
        order.order(rng, names);
        for (const auto* n : names) args.push_back(std::to_string(n - first + 1));
        // Paused queues are left out of the order; 0 pads it to its fixed length (skipped).
        for (size_t k = names.size(); k < order.names().size(); ++k) args.push_back("0");
    }
}

BasicFetcher::BasicFetcher(const Keys& keys, const QueueOrder& order, size_t prefetch,
                           size_t max_refills, size_t threads)
    : BasicFetcher(keys, order, prefetch, max_refills, nullptr, threads) {}

BasicFetcher::BasicFetcher(const Keys& keys, const QueueOrder& order, size_t prefetch,
                           size_t max_refills, std::unique_ptr<FairFetch> fair, size_t threads)
    : keys_(keys), order_(order), prefetch_(std::max<size_t>(prefetch, 1)), fair_(std::move(fair)) {
    for (const auto& name : order_.names()) queue_keys_.push_back(keys_.queue(name));
    // Without fair queues, every fetch asks only a few queues (prefix_fetch.hpp); with them,
    // the fair fetch script walks every queue.
    if (!fair_) prefix_ = std::make_unique<PrefixFetch>(order_, queue_keys_);
    if (prefetch_ > 1) {
        if (fair_) pop_script_ = std::make_unique<redis::Script>(FairFetch::script_source());
        buffer_ = std::make_unique<FetchBuffer>(prefetch_, max_refills, threads);
    } else if (fair_) {
        combiner_ = std::make_unique<FetchCombiner>(threads);
    }
}

BasicFetcher::~BasicFetcher() = default;

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
    redis::resend_noscript(conn, pending, replies, 0, pending.size() - 1);
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
        auto replies = conn.pipeline_unchecked(pending);
        redis::resend_noscript(conn, pending, replies, 0, pending.size());
        pending.clear();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(seconds * 250));
    return std::nullopt;
}

std::vector<UnitOfWork> BasicFetcher::pop_batch(redis::Connection& conn, std::mt19937_64& rng,
                                                std::vector<redis::Command>& pending) const {
    if (prefix_) return prefix_->take(conn, rng, prefetch_, pending);
    thread_local std::vector<std::string> args;
    batch_order_args(order_, rng, prefetch_, args);
    if (fair_) fair_->fair_args(args);
    // The previous job's releases go out in the same write (Script::run_after).
    return batch_units(pop_script_->run_after(conn, &pending, queue_keys_, args), order_.names());
}

std::optional<UnitOfWork> BasicFetcher::retrieve_work(redis::Connection& conn, std::mt19937_64& rng,
                                                      size_t slot,
                                                      std::vector<redis::Command>& pending) const {
    if (order_.all_paused()) return wait_all_paused(conn, pending, kTimeoutSeconds);
    if (buffer_) {
        bool drained = false;
        auto unit = buffer_->take_or_refill(
            [&](std::vector<UnitOfWork>&) { return pop_batch(conn, rng, pending); },
            std::chrono::seconds(kTimeoutSeconds), drained, slot);
        if (unit) {
            // Lock releases of the previous job stay in `pending`: they go out with this job's
            // first round trip (a middleware's acquire), or just before its handler runs
            // (processor.cpp), so that they cost no round trip of their own.
            return unit;
        }
        if (!drained) return std::nullopt;
        // Every queue was empty: block below, as without prefetch.
    }
    if (fair_) {
        // The fair queues are served from their tenant lists; BRPOP below (every queue empty)
        // then takes a new job straight from its plain queue.
        // Without prefetch: one script call for every thread waiting at this moment
        // (fetch_combiner.hpp). With prefetch the buffer's refill found them empty just now.
        std::optional<UnitOfWork> unit;
        if (combiner_) {
            unit = combiner_->take(
                [&](size_t count) { return fair_->take(conn, rng, pending, queue_keys_, count); });
        } else {
            unit = fair_->take_one(conn, rng, pending, queue_keys_);
        }
        if (unit) return unit;
    }
    if (prefix_ && !buffer_) {
        // Only the queues last seen non-empty, a plain RPOP each (prefix_fetch.hpp).
        if (auto unit = prefix_->pop_one(conn, rng, pending)) return unit;
    }
    // Every queue is empty: block on all of them, in this fetch's order, as Sidekiq does.
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
    if (reply.size() != 2) reply.unexpected("BRPOP returned an unexpected reply");
    if (buffer_) buffer_->note_taken(slot);
    UnitOfWork unit{std::string(keys_.queue_name(reply[0].str())), std::string(reply[1].str())};
    if (prefix_) {
        const auto& all = order_.names();
        const auto at = std::find(all.begin(), all.end(), unit.queue);
        if (at != all.end()) prefix_->woke_with_job(static_cast<size_t>(at - all.begin()));
    }
    return unit;
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

std::vector<UnitOfWork> BasicFetcher::take_buffered() const {
    return buffer_ ? buffer_->take_buffered() : std::vector<UnitOfWork>{};
}

std::vector<redis::Command> BasicFetcher::release_commands() const {
    auto units = take_buffered();
    std::reverse(units.begin(), units.end());  // the first fetched ends up at the very front
    return units.empty() ? std::vector<redis::Command>{} : requeue_commands(units);
}

}  // namespace kiqd
