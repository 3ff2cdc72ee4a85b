#include "server/metrics_server.hpp"

#include <fmt/format.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <cstring>
#include <optional>

#include "common/outcome_counters.hpp"
#include "handlers/runner_handler.hpp"
#include "kiqd/clock.hpp"
#include "kiqd/job.hpp"
#include "server/eviction_policy.hpp"
#include "server/fair_metrics.hpp"
#include "server/metrics_http.hpp"
#include "server/process_metrics.hpp"
#include "server/prometheus_text.hpp"

namespace kiqd {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Steady = std::chrono::steady_clock;

namespace {

// Limits that keep the endpoint from costing kiqd the descriptors its Redis connections and exec
// pipes need (docs/hardening-exec.md): at most kMaxSessions connections are open at once (more
// wait in the kernel's listen backlog, costing kiqd nothing, until one ends); a connection must
// deliver a whole request within kRequestTimeout, may stay idle between requests for
// kIdleTimeout, and must take its response within kWriteTimeout.
constexpr size_t kMaxSessions = 64;
constexpr auto kRequestTimeout = std::chrono::seconds(5);
constexpr auto kIdleTimeout = std::chrono::seconds(10);
constexpr auto kWriteTimeout = std::chrono::seconds(5);
// accept() failing for lack of descriptors (EMFILE, ENFILE, ...) is retried after a pause that
// doubles up to the maximum, instead of at once (which spins a core while the connection waits).
constexpr auto kAcceptRetryFirst = std::chrono::milliseconds(50);
constexpr auto kAcceptRetryMax = std::chrono::milliseconds(1000);

}  // namespace

// The server thread's state; only that thread touches it after start().
struct MetricsServer::Impl {
    Impl(MetricsServer& server, spdlog::logger& log) : server(server), log(log) {}
    void accept_next();
    void accept_one();
    void accept_failed(int error);
    void session_ended();

    MetricsServer& server;
    spdlog::logger& log;
    // Declared before io: io's destructor destroys pending handlers, and with them sessions,
    // which call session_ended().
    bool stopping = false;
    size_t sessions = 0;
    bool waiting_for_a_free_session = false;
    std::optional<Steady::time_point> accept_failing_since;  // an EMFILE-like episode, logged once
    std::chrono::milliseconds accept_retry = kAcceptRetryFirst;
    asio::io_context io;
    tcp protocol = tcp::v4();  // of the listening address
    tcp::acceptor acceptor{io};
    asio::steady_timer accept_retry_timer{io};
};

namespace {

// One connection: read requests and answer them until the client closes or goes quiet.
class Session : public std::enable_shared_from_this<Session> {
  public:
    Session(tcp::socket socket, MetricsServer::Impl& impl)
        : stream_(std::move(socket)), impl_(impl) {
        ++impl_.sessions;
    }
    ~Session() { impl_.session_ended(); }
    void start() { read_request(); }

  private:
    // Between requests: wait up to kIdleTimeout for the next one to begin.
    void wait_for_request() {
        if (buffer_.size() > 0) return read_request();  // pipelined: already here
        stream_.expires_after(kIdleTimeout);
        stream_.async_read_some(buffer_.prepare(4096),
                                [self = shared_from_this()](beast::error_code ec, size_t n) {
                                    if (ec) return self->close();
                                    self->buffer_.commit(n);
                                    self->read_request();
                                });
    }
    void read_request() {
        parser_.emplace();
        metrics_http::limit(*parser_);
        stream_.expires_after(kRequestTimeout);
        http::async_read(stream_, buffer_, *parser_,
                         [self = shared_from_this()](beast::error_code ec, size_t) {
                             if (!ec) return self->respond();
                             // A request the client got wrong is answered (400, 413, 431) before
                             // the connection closes; a timeout or a reset just closes it.
                             auto refusal = metrics_http::respond_to_error(ec);
                             if (!refusal) return self->close();
                             self->send(std::move(*refusal));
                         });
    }
    void respond() {
        send(metrics_http::respond(parser_->get(), [this](const std::string& target) {
            return impl_.server.handle(target);
        }));
    }
    void send(metrics_http::Response response) {
        response_ = std::move(response);
        stream_.expires_after(kWriteTimeout);
        http::async_write(stream_, response_,
                          [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (ec || !self->response_.keep_alive()) return self->close();
                              self->wait_for_request();
                          });
    }
    void close() {
        beast::error_code ignored;
        stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    }

    beast::tcp_stream stream_;
    MetricsServer::Impl& impl_;
    beast::flat_buffer buffer_;
    std::optional<metrics_http::Parser> parser_;
    metrics_http::Response response_;
};

}  // namespace

void MetricsServer::Impl::accept_next() {
    if (stopping || !acceptor.is_open()) return;
    if (sessions >= kMaxSessions) {
        waiting_for_a_free_session = true;  // session_ended() resumes
        return;
    }
    acceptor.async_wait(tcp::acceptor::wait_read, [this](beast::error_code ec) {
        if (ec == asio::error::operation_aborted || stopping || !acceptor.is_open()) return;
        accept_one();
    });
}

void MetricsServer::Impl::accept_one() {
    // accept4 rather than asio's accept: the session's socket is close-on-exec from its first
    // instant, so an exec handler started on another thread meanwhile cannot inherit it.
    const int fd = ::accept4(acceptor.native_handle(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
        const int error = errno;
        if (error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM)
            return accept_failed(error);
        // EAGAIN (the client left again), ECONNABORTED, EINTR, ...: wait for the next one.
        return accept_next();
    }
    if (accept_failing_since) {
        log.info("metrics: accepting connections again after {:.1f} s",
                 std::chrono::duration<double>(Steady::now() - *accept_failing_since).count());
        accept_failing_since.reset();
        accept_retry = kAcceptRetryFirst;
    }
    tcp::socket socket(io);
    beast::error_code ec;
    socket.assign(protocol, fd, ec);
    if (ec)
        ::close(fd);
    else
        std::make_shared<Session>(std::move(socket), *this)->start();
    accept_next();
}

void MetricsServer::Impl::accept_failed(int error) {
    if (!accept_failing_since) {
        accept_failing_since = Steady::now();
        log.warn("metrics: cannot accept connections: {}; retrying with backoff", strerror(error));
    }
    accept_retry_timer.expires_after(accept_retry);
    accept_retry = std::min(accept_retry * 2, kAcceptRetryMax);
    accept_retry_timer.async_wait([this](beast::error_code ec) {
        if (!ec) accept_next();
    });
}

void MetricsServer::Impl::session_ended() {
    --sessions;
    if (waiting_for_a_free_session && !stopping) {
        waiting_for_a_free_session = false;
        accept_next();
    }
}

namespace {

void gauge(std::string& out, const char* name, const char* help, double value) {
    append_metric(out, name, "gauge", help, value);
}

void counter(std::string& out, const char* name, const char* help, double value) {
    append_metric(out, name, "counter", help, value);
}

// What happened to jobs besides running, since this process started (always present, 0 until
// the first event, so that rate() and alerts work from the first scrape).
void render_outcomes(std::string& out, const WorkState& work) {
    const auto& c = outcome_counters();
    auto n = [](const OutcomeCounters::Counter& v) {
        return static_cast<double>(v.load(std::memory_order_relaxed));
    };
    counter(out, "kiqd_jobs_retried_total", "Failed jobs with a retry scheduled.", n(c.retried));
    counter(out, "kiqd_jobs_dead_total",
            "Jobs sent to the dead set (retries exhausted, unrunnable, poison pills).", n(c.dead));
    counter(out, "kiqd_jobs_discarded_total", "Failed jobs with retry: false, dropped.",
            n(c.discarded));
    counter(out, "kiqd_jobs_unrunnable_total",
            "Payloads that could not be run (not JSON, too large, no class); in the dead set.",
            n(c.unrunnable));
    counter(out, "kiqd_jobs_requeued_total",
            "Running jobs pushed back to their queue by a shutdown.",
            static_cast<double>(work.requeued.load(std::memory_order_relaxed)));
    counter(out, "kiqd_orphans_recovered_total",
            "Jobs of dead processes put back in their queues (reliable fetch).",
            n(c.orphans_recovered));
    counter(out, "kiqd_poison_pills_total",
            "Jobs whose process died under them max_interruptions times; in the dead set.",
            n(c.poison_pills));
    counter(out, "kiqd_jobs_throttled_total", "Jobs put back in the schedule by a throttle.",
            n(c.throttled));
    counter(out, "kiqd_jobs_parked_total", "Jobs parked because their class or queue is paused.",
            n(c.parked));
    counter(out, "kiqd_jobs_rerouted_total", "Jobs moved to a fair-tenant queue.", n(c.rerouted));
    counter(out, "kiqd_unique_conflicts_total", "Duplicates refused by a unique lock.",
            n(c.unique_conflicts));
    counter(out, "kiqd_unique_locks_reaped_total",
            "Unique locks whose holder was gone, freed by this process's reaper.",
            n(c.unique_locks_reaped));
    counter(out, "kiqd_exec_timeouts_total", "exec commands stopped at their timeout.",
            n(c.exec_timeouts));
    counter(out, "kiqd_runner_timeouts_total", "Runner jobs stopped at their timeout.",
            n(c.runner_timeouts));
    counter(out, "kiqd_redis_reconnects_total",
            "Redis connections opened again after one was lost.", n(c.redis_reconnects));
}

}  // namespace

MetricsServer::MetricsServer(const MetricsConfig& config, Sources sources, spdlog::logger& log)
    : config_(config),
      sources_(std::move(sources)),
      log_(log),
      conn_([&] {
          auto o = sources_.redis;
          // A scrape must answer within Prometheus's timeout even when Redis is gone.
          o.connect_timeout = std::min(o.connect_timeout, std::chrono::milliseconds(1000));
          o.socket_timeout = std::chrono::milliseconds(2000);
          return o;
      }()),
      impl_(std::make_unique<Impl>(*this, log)) {}

MetricsServer::~MetricsServer() {
    stop();
}

void MetricsServer::start() {
    beast::error_code ec;
    const auto address = asio::ip::make_address(config_.host, ec);
    if (ec)
        throw std::runtime_error("metrics.listen: '" + config_.host +
                                 "' is not an IP address: " + ec.message());
    const tcp::endpoint endpoint(address, static_cast<unsigned short>(config_.port));
    auto& a = impl_->acceptor;
    impl_->protocol = endpoint.protocol();
    // The listening socket is close-on-exec from the start (asio's open() is not).
    const int fd = ::socket(endpoint.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        ec.assign(errno, beast::system_category());
    else
        a.assign(endpoint.protocol(), fd, ec);
    if (ec && fd >= 0) ::close(fd);
    if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) a.bind(endpoint, ec);
    if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
    if (!ec) a.non_blocking(true, ec);  // accept4 must not block when a client left again
    if (ec)
        throw std::runtime_error("metrics.listen: cannot listen on " + config_.listen + ": " +
                                 ec.message());
    port_ = a.local_endpoint().port();
    impl_->accept_next();
    thread_ = std::thread([this] {
        try {
            impl_->io.run();
        } catch (const std::exception& e) {
            log_.error("metrics server stopped: {}", e.what());
        }
    });
    log_.info("metrics: serving /metrics and /healthz on http://{}:{}", config_.host, port_.load());
}

void MetricsServer::stop() noexcept {
    if (!thread_.joinable()) return;
    asio::post(impl_->io, [this] {
        beast::error_code ignored;
        impl_->stopping = true;
        impl_->acceptor.close(ignored);
        impl_->io.stop();  // open sessions are dropped: the process is going away
    });
    thread_.join();
}

MetricsServer::Response MetricsServer::handle(const std::string& target) {
    const std::string path = target.substr(0, target.find('?'));
    if (path == "/metrics")
        return {200, "text/plain; version=0.0.4; charset=utf-8", render_metrics()};
    if (path == "/healthz") {
        std::string problem;
        try {
            conn_.command({"PING"});
        } catch (const std::exception& e) {
            problem = std::string("redis unreachable: ") + e.what() + "\n";
        }
        const bool quiet = sources_.quiet();
        const size_t alive = sources_.threads_alive();
        if (!quiet && alive < sources_.work.slots())
            problem +=
                fmt::format("processor threads: {} of {} alive\n", alive, sources_.work.slots());
        if (!problem.empty()) return {503, "text/plain; charset=utf-8", problem};
        return {200, "text/plain; charset=utf-8", quiet ? "quiet\n" : "ok\n"};
    }
    return {404, "text/plain; charset=utf-8", "not found: try /metrics or /healthz\n"};
}

std::string MetricsServer::render_metrics() {
    std::string out;
    sources_.jobs.render(out);
    render_runner_metrics(out);
    gauge(out, "kiqd_busy_threads", "Processor threads running a job now.",
          static_cast<double>(sources_.work.busy()));
    gauge(out, "kiqd_threads", "Processor threads of this process (concurrency).",
          static_cast<double>(sources_.work.slots()));
    gauge(out, "kiqd_threads_alive", "Processor threads that are running their loop.",
          static_cast<double>(sources_.threads_alive()));
    const auto [cpu_running, cpu_held] = sources_.cpu();
    gauge(out, "kiqd_cpu_bound_running",
          "cpu-bound jobs running now (at most cpu_bound_concurrency).",
          static_cast<double>(cpu_running));
    gauge(out, "kiqd_cpu_bound_held",
          "cpu-bound jobs fetched and waiting in this process for a cpu slot.",
          static_cast<double>(cpu_held));
    render_outcomes(out, sources_.work);
    render_process_metrics(out);
    // Queue sizes and latencies and the cluster's sets and processes: one pipeline per scrape,
    // and one more for the processes' busy counts.
    bool redis_up = true;
    std::string sizes, latencies, cluster, fair, eviction;
    try {
        std::vector<redis::Command> cmds;
        for (const auto& q : sources_.queues) {
            cmds.push_back({"LLEN", sources_.keys.queue(q)});
            cmds.push_back({"LRANGE", sources_.keys.queue(q), "-1", "-1"});
        }
        const size_t first_cluster = cmds.size();
        cmds.push_back({"ZCARD", sources_.keys.retry()});
        cmds.push_back({"ZCARD", sources_.keys.schedule()});
        cmds.push_back({"ZCARD", sources_.keys.dead()});
        cmds.push_back({"SMEMBERS", sources_.keys.processes()});
        auto replies = conn_.pipeline(cmds);
        cluster =
            render_cluster(replies[first_cluster].integer(), replies[first_cluster + 1].integer(),
                           replies[first_cluster + 2].integer(), replies[first_cluster + 3]);
        const double now = epoch_seconds();
        for (size_t i = 0; i < sources_.queues.size(); ++i) {
            const std::string label = prometheus_escape(sources_.queues[i]);
            sizes += fmt::format("kiqd_queue_size{{queue=\"{}\"}} {}\n", label,
                                 replies[2 * i].integer());
            double latency = 0;
            const auto& oldest = replies[2 * i + 1];
            if (oldest.size() == 1) {
                auto parsed = parse_job(std::string(oldest[0].str()), sources_.queues[i]);
                if (auto* job = std::get_if<Job>(&parsed))
                    if (auto at = job->enqueued_at()) latency = std::max(0.0, now - *at);
            }
            latencies +=
                fmt::format("kiqd_queue_latency_seconds{{queue=\"{}\"}} {}\n", label, latency);
        }
        fair = render_fair_metrics(conn_, sources_.keys, sources_.fair_queues, now);
        // An evicting Redis loses jobs in silence (eviction_policy.hpp); "unknown" when a
        // managed Redis does not say.
        const auto policy = read_maxmemory_policy(conn_);
        eviction = fmt::format(
            "# HELP kiqd_redis_maxmemory_policy Redis's maxmemory-policy (anything but "
            "noeviction can evict jobs).\n# TYPE kiqd_redis_maxmemory_policy gauge\n"
            "kiqd_redis_maxmemory_policy{{policy=\"{}\"}} 1\n",
            prometheus_escape(policy.value_or("unknown")));
        gauge(eviction, "kiqd_redis_noeviction",
              "1 when Redis's maxmemory-policy is noeviction, 0 when it is not or cannot be told.",
              policy == "noeviction" ? 1 : 0);
    } catch (const std::exception& e) {
        redis_up = false;
        sizes.clear();
        latencies.clear();
        cluster.clear();
        fair.clear();
        eviction.clear();
        log_.debug("metrics: cannot read queue sizes: {}", e.what());
    }
    out +=
        "# HELP kiqd_queue_size Jobs waiting in each queue this process serves.\n"
        "# TYPE kiqd_queue_size gauge\n" +
        sizes;
    out +=
        "# HELP kiqd_queue_latency_seconds Age of the oldest job in each queue this process "
        "serves.\n# TYPE kiqd_queue_latency_seconds gauge\n" +
        latencies;
    out += cluster;
    out += fair;
    out += eviction;
    gauge(out, "kiqd_redis_up", "1 when the last scrape could read Redis.", redis_up ? 1 : 0);
    return out;
}

std::string MetricsServer::render_cluster(long long retry, long long scheduled, long long dead,
                                          const redis::Reply& members) {
    // Each process's busy count and whether its record is still there (a process that died
    // without cleaning up stays in the set until a Sidekiq or kiqd process prunes it).
    std::vector<redis::Command> cmds;
    for (size_t i = 0; i < members.size(); ++i) {
        const std::string key = sources_.keys.process(members[i].str());
        cmds.push_back({"HGET", key, "busy"});
        cmds.push_back({"EXISTS", key});
    }
    long long alive = 0, busy = 0;
    if (!cmds.empty()) {
        auto replies = conn_.pipeline(cmds);
        for (size_t i = 0; i < members.size(); ++i) {
            if (replies[2 * i + 1].integer() != 1) continue;
            ++alive;
            if (replies[2 * i].is_string())
                busy += std::atoll(std::string(replies[2 * i].str()).c_str());
        }
    }
    std::string out;
    // The same values from every process of a cluster: aggregate with max, not sum
    // (docs/operations.md#metrics-and-health).
    gauge(out, "kiqd_cluster_retry_jobs", "Jobs in the retry set (cluster-wide).",
          static_cast<double>(retry));
    gauge(out, "kiqd_cluster_scheduled_jobs", "Jobs in the schedule set (cluster-wide).",
          static_cast<double>(scheduled));
    gauge(out, "kiqd_cluster_dead_jobs", "Jobs in the dead set (cluster-wide).",
          static_cast<double>(dead));
    gauge(out, "kiqd_cluster_processes",
          "Sidekiq and kiqd processes with a live heartbeat record (cluster-wide).",
          static_cast<double>(alive));
    gauge(out, "kiqd_cluster_busy_jobs",
          "Jobs running now in all processes, as their heartbeats report (cluster-wide).",
          static_cast<double>(busy));
    return out;
}

}  // namespace kiqd
