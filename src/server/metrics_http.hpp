#pragma once
// The HTTP side of the metrics endpoint, without sockets: how a request is read (the parser and
// its limits) and what is answered to it — to a request that was read, and to one that could
// not be. MetricsServer's sessions run every request through here, and so does the fuzz target
// (tests/fuzz/fuzz_metrics_http.cpp), which feeds it arbitrary bytes. Pure functions of their
// arguments; called on the metrics server's thread (or the fuzzer's).
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>

#include "server/metrics_answer.hpp"

namespace kiqd::metrics_http {

using Request = boost::beast::http::request<boost::beast::http::string_body>;
using Response = boost::beast::http::response<boost::beast::http::string_body>;
using Parser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// A request's start line and header fields together, and its body (GET and HEAD have none).
// Beyond either, the request is refused (431, 413) and the connection closed.
constexpr std::size_t kMaxRequestHeader = 8 * 1024;
constexpr std::size_t kMaxRequestBody = 64 * 1024;

// What the server answers to a path (Answer: status, content type and body).
using Handler = std::function<Answer(const std::string& target)>;

// Sets the limits above on a fresh parser (one per request).
void limit(Parser& parser);

// The response to a request that was read whole: `handler(target)` for GET and HEAD (HEAD gets
// the header only), 405 for any other method; in the request's version (1.0 or 1.1); kept alive
// when the request asks for it.
Response respond(const Request& request, const Handler& handler);

// The response to a request that could not be read because of what the client sent: 431 for a
// header over the limit, 413 for a body over it, 400 for anything malformed; it closes the
// connection. nullopt when the failure is the connection's (end of stream, a timeout, a reset):
// there is nobody to answer.
std::optional<Response> respond_to_error(const boost::beast::error_code& error);

}  // namespace kiqd::metrics_http
