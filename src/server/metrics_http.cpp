// The metrics endpoint's requests and responses without sockets (see metrics_http.hpp).
#include "server/metrics_http.hpp"

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/status.hpp>

namespace kiqd::metrics_http {

namespace http = boost::beast::http;

namespace {

const char* const kTextPlain = "text/plain; charset=utf-8";

Response make_response(unsigned version, int status, const std::string& content_type,
                       bool keep_alive) {
    Response response;
    response.version(version);
    response.result(static_cast<http::status>(status));
    response.set(http::field::server, "kiqd");
    response.set(http::field::content_type, content_type);
    response.keep_alive(keep_alive);
    return response;
}

}  // namespace

void limit(Parser& parser) {
    parser.header_limit(static_cast<std::uint32_t>(kMaxRequestHeader));
    parser.body_limit(kMaxRequestBody);
}

Response respond(const Request& request, const Handler& handler) {
    const bool get = request.method() == http::verb::get;
    const bool head = request.method() == http::verb::head;
    Answer answer{405, kTextPlain, "method not allowed\n"};
    if (get || head) answer = handler(std::string(request.target()));
    // The request's version: 1.0 or 1.1, the only ones the parser accepts (any other is
    // bad_version, answered 400).
    Response response =
        make_response(request.version(), answer.status, answer.content_type, request.keep_alive());
    if (!head) response.body() = std::move(answer.body);
    response.prepare_payload();
    return response;
}

std::optional<Response> respond_to_error(const boost::beast::error_code& error) {
    if (error.category() != http::make_error_code(http::error::end_of_stream).category())
        return std::nullopt;  // a timeout, a reset: the connection's, not the request's
    int status = 400;
    std::string body = "bad request\n";
    if (error == http::error::end_of_stream || error == http::error::partial_message)
        return std::nullopt;  // the client went away
    if (error == http::error::header_limit) {
        status = 431;
        body = "request header too large\n";
    } else if (error == http::error::body_limit) {
        status = 413;
        body = "request body too large\n";
    }
    Response response = make_response(11, status, kTextPlain, false);
    response.body() = std::move(body);
    response.prepare_payload();
    return response;
}

}  // namespace kiqd::metrics_http
