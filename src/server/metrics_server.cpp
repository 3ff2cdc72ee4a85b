#include "server/metrics_server.hpp"

#include <fmt/format.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "kiqd/clock.hpp"
#include "kiqd/job.hpp"

namespace kiqd {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct MetricsServer::Impl {
    asio::io_context io;
    tcp::acceptor acceptor{io};
    bool stopped = false;
};

namespace {

// One connection: read requests and answer them until the client closes or goes quiet.
class Session : public std::enable_shared_from_this<Session> {
  public:
    Session(tcp::socket socket, MetricsServer& server)
        : stream_(std::move(socket)), server_(server) {}
    void start() { read(); }

  private:
    void read() {
        request_ = {};
        stream_.expires_after(std::chrono::seconds(5));
        http::async_read(stream_, buffer_, request_,
                         [self = shared_from_this()](beast::error_code ec, size_t) {
                             if (ec) return self->close();
                             self->respond();
                         });
    }
    void respond() {
        MetricsServer::Response r{405, "text/plain; charset=utf-8", "method not allowed\n"};
        if (request_.method() == http::verb::get || request_.method() == http::verb::head)
            r = server_.handle(std::string(request_.target()));
        response_ = {};
        response_.version(request_.version());
        response_.result(static_cast<http::status>(r.status));
        response_.set(http::field::server, "kiqd");
        response_.set(http::field::content_type, r.content_type);
        response_.keep_alive(request_.keep_alive());
        if (request_.method() != http::verb::head) response_.body() = std::move(r.body);
        response_.prepare_payload();
        http::async_write(stream_, response_,
                          [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (ec || !self->response_.keep_alive()) return self->close();
                              self->read();
                          });
    }
    void close() {
        beast::error_code ignored;
        stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    }

    beast::tcp_stream stream_;
    MetricsServer& server_;
    beast::flat_buffer buffer_;
    http::request<http::string_body> request_;
    http::response<http::string_body> response_;
};

void accept_loop(tcp::acceptor& acceptor, MetricsServer& server) {
    acceptor.async_accept([&acceptor, &server](beast::error_code ec, tcp::socket socket) {
        if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
        if (!ec) std::make_shared<Session>(std::move(socket), server)->start();
        accept_loop(acceptor, server);
    });
}

void gauge(std::string& out, const char* name, const char* help, double value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, value);
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
      impl_(std::make_unique<Impl>()) {}

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
    a.open(endpoint.protocol(), ec);
    if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) a.bind(endpoint, ec);
    if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
        throw std::runtime_error("metrics.listen: cannot listen on " + config_.listen + ": " +
                                 ec.message());
    port_ = a.local_endpoint().port();
    accept_loop(a, *this);
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
    // Queue sizes and latencies, one pipeline per scrape.
    bool redis_up = true;
    std::string sizes, latencies;
    try {
        std::vector<redis::Command> cmds;
        for (const auto& q : sources_.queues) {
            cmds.push_back({"LLEN", sources_.keys.queue(q)});
            cmds.push_back({"LRANGE", sources_.keys.queue(q), "-1", "-1"});
        }
        auto replies = conn_.pipeline(cmds);
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
    } catch (const std::exception& e) {
        redis_up = false;
        sizes.clear();
        latencies.clear();
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
    gauge(out, "kiqd_redis_up", "1 when the last scrape could read Redis.", redis_up ? 1 : 0);
    return out;
}

}  // namespace kiqd
