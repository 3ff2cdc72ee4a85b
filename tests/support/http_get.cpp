#include "support/http_get.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace kiqd::test {

std::pair<int, std::string> http_get(int port, const std::string& target) {
    namespace beast = boost::beast;
    namespace http = beast::http;
    try {
        boost::asio::io_context io;
        beast::tcp_stream stream(io);
        stream.expires_after(std::chrono::seconds(10));
        stream.connect(boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"),
                                                      static_cast<unsigned short>(port)));
        http::request<http::empty_body> req{http::verb::get, target, 11};
        req.set(http::field::host, "127.0.0.1");
        http::write(stream, req);
        beast::flat_buffer buffer;
        http::response<http::string_body> res;
        http::read(stream, buffer, res);
        return {res.result_int(), res.body()};
    } catch (const std::exception&) {
        return {0, ""};
    }
}

}  // namespace kiqd::test
