// Fuzz target: the metrics endpoint's request handling (server/metrics_http.hpp, the code each
// MetricsServer session runs), fed arbitrary bytes as what one connection sends. Requests are
// parsed one after the other as the session does (pipelined requests included) and answered by
// a real MetricsServer's handle() — its Redis is a closed loopback port, so /metrics and
// /healthz take their Redis-down paths.
// The contract, for every request that was read whole and for every one that could not be:
// a response that serialises to valid HTTP/1.0 or 1.1 (parsed back with Beast's response
// parser), with a status kiqd sends (200, 400, 404, 405, 413, 431, 503), a Content-Length equal
// to its body, at most kMaxResponse bytes; a refused request closes the connection. Bytes that
// end inside a request get no response (the session would wait for the rest until its timeout).
// A crash, a sanitizer report or a broken contract aborts.
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/serializer.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>

#include "kiqd/redis/endpoint.hpp"
#include "server/metrics_http.hpp"
#include "server/metrics_server.hpp"

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using kiqd::metrics_http::Response;

constexpr size_t kMaxResponse = 64 * 1024;

[[noreturn]] void broken(const char* what, const std::string& detail) {
    std::fprintf(stderr, "fuzz_metrics_http: %s: %s\n", what, detail.c_str());
    std::abort();
}

// The server behind handle(): nothing has run, one processor thread, Redis unreachable.
struct Server {
    kiqd::JobMetrics jobs;
    kiqd::WorkState work{1};
    kiqd::Keys keys;
    std::shared_ptr<spdlog::logger> log =
        std::make_shared<spdlog::logger>("fuzz", std::make_shared<spdlog::sinks::null_sink_mt>());
    kiqd::MetricsServer metrics{kiqd::MetricsConfig{"127.0.0.1:0", "127.0.0.1", 0, -1},
                                {jobs,
                                 work,
                                 keys,
                                 {"default", "bytes\xff"},
                                 {kiqd::redis::parse_redis_url("redis://127.0.0.1:1/0"),
                                  std::chrono::milliseconds(100), std::chrono::milliseconds(100)},
                                 [] { return size_t{1}; },
                                 [] { return false; },
                                 [] {
                                     return std::pair<size_t, size_t>{0, 0};
                                 }},
                                *log};
};

std::string serialise(Response& response) {
    std::string out;
    http::response_serializer<http::string_body> serializer(response);
    beast::error_code ec;
    while (!serializer.is_done()) {
        serializer.next(ec, [&](beast::error_code&, const auto& buffers) {
            out += beast::buffers_to_string(buffers);
            serializer.consume(beast::buffer_bytes(buffers));
        });
        if (ec) broken("the response does not serialise", ec.message());
    }
    return out;
}

// Checks one response against the contract; returns whether the connection stays open.
bool check(Response response, bool refusal) {
    static const std::set<int> statuses{200, 400, 404, 405, 413, 431, 503};
    const std::string wire = serialise(response);
    if (wire.size() > kMaxResponse) broken("response too large", std::to_string(wire.size()));
    if (wire.compare(0, 9, "HTTP/1.1 ") != 0 && wire.compare(0, 9, "HTTP/1.0 ") != 0)
        broken("not an HTTP/1.x status line", wire.substr(0, 40));
    http::response_parser<http::string_body> parser;
    parser.eager(true);  // the header and the body in one put
    beast::error_code ec;
    parser.put(net::buffer(wire), ec);
    if (!ec && !parser.is_done()) parser.put_eof(ec);
    if (ec || !parser.is_done()) broken("the response does not parse back", ec.message() + wire);
    const auto& back = parser.get();
    if (!statuses.count(back.result_int()))
        broken("unexpected status", std::to_string(back.result_int()));
    const auto length = back[http::field::content_length];
    if (length.empty() || std::to_string(back.body().size()) != length)
        broken("Content-Length does not match the body", wire);
    if (refusal && back.keep_alive()) broken("a refused request keeps the connection", wire);
    return back.keep_alive();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static Server* server = new Server;  // lives for the whole run
    const auto handler = [](const std::string& target) { return server->metrics.handle(target); };
    // What the session does with one connection's bytes: request after request until they run
    // out, a request cannot be read, or a response closes the connection.
    size_t offset = 0;
    while (offset < size) {
        kiqd::metrics_http::Parser parser;
        kiqd::metrics_http::limit(parser);
        parser.eager(true);
        beast::error_code ec;
        while (!parser.is_done() && offset < size) {
            const size_t used = parser.put(net::buffer(data + offset, size - offset), ec);
            offset += used;
            if (ec == http::error::need_more && used == 0) break;  // the rest is still on its way
            if (ec && ec != http::error::need_more) break;
            ec = {};
        }
        if (ec == http::error::need_more || (!ec && !parser.is_done())) return 0;
        if (ec) {
            auto refusal = kiqd::metrics_http::respond_to_error(ec);
            if (!refusal) broken("a malformed request got no response", ec.message());
            check(std::move(*refusal), true);
            return 0;
        }
        if (!check(kiqd::metrics_http::respond(parser.get(), handler), false)) return 0;
    }
    return 0;
}
