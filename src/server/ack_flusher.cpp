#include "server/ack_flusher.hpp"

#include <thread>

#include "fetch/fetch_buffer.hpp"
#include "server/connection_budget.hpp"

namespace kiqd {
namespace {

// With nothing deferred the thread sleeps until a processor defers something; this only bounds
// that sleep should a wake-up ever be missed.
constexpr std::chrono::seconds kIdleWait{1};

}  // namespace

AckFlusher::AckFlusher(Runtime& rt, const ReliableFetcher& fetcher)
    : rt_(rt), fetcher_(fetcher), worker_("ack-flusher", rt.log) {}

AckFlusher::~AckFlusher() {
    stop();
}

void AckFlusher::start() {
    if (fetcher_.batch_size() <= 1) return;
    conn_.emplace(named_connection(rt_.connection_options, rt_.identity, "ack-flusher"));
    fetcher_.set_ack_watcher([this] { worker_.wake(); });
    worker_.start(
        PeriodicWorker::Duration::zero(), [this] { return next_wait(); }, [this] { round(); });
}

void AckFlusher::round() {
    const auto oldest = fetcher_.oldest_deferred_ack();
    if (!oldest || std::chrono::steady_clock::now() - *oldest < FetchBuffer::kAckDelay) return;
    try {
        const auto started = RedisHealth::Clock::now();
        if (fetcher_.flush_acknowledgements(*conn_) > 0)
            rt_.health.wrote(started, RedisHealth::Write::any);
        backoff_ = std::chrono::milliseconds{0};
    } catch (const redis::Error& e) {
        // The acknowledgements wait for the next refill or the next try here.
        rt_.health.failed(e);
        backoff_ = std::min(std::chrono::milliseconds(5000),
                            std::max(std::chrono::milliseconds(250), backoff_ * 2));
    }
}

PeriodicWorker::Duration AckFlusher::next_wait() {
    if (backoff_ > std::chrono::milliseconds{0}) return backoff_;
    const auto oldest = fetcher_.oldest_deferred_ack();
    if (!oldest)
        return fetcher_.ack_watcher_idle() ? PeriodicWorker::Duration(kIdleWait)
                                           : PeriodicWorker::Duration::zero();
    const auto due = *oldest + FetchBuffer::kAckDelay - std::chrono::steady_clock::now();
    return std::max(due, PeriodicWorker::Duration::zero());
}

void AckFlusher::stop() noexcept {
    if (!worker_.stop() || !conn_) return;
    for (int attempt = 0; attempt < 3; ++attempt) {
        try {
            fetcher_.flush_acknowledgements(*conn_);
            break;
        } catch (const std::exception& e) {
            rt_.log.debug("reliable fetch: last acknowledgement flush failed: {}", e.what());
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    }
    conn_.reset();
}

}  // namespace kiqd
