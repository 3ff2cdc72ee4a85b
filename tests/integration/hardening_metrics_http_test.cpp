// Hardening [hardening][metrics]: what the metrics endpoint answers to requests it cannot
// serve, over a real socket. A malformed request gets 400, a header over 8 KiB 431, a body over
// 64 KiB 413, each with the connection closed afterwards (before, the session closed without a
// word); an unknown method gets 405 and the connection stays usable.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "server/logging.hpp"
#include "server/metrics_server.hpp"
#include "support/metrics_server_fixture.hpp"
#include "support/redis_server.hpp"

using kiqd::test::RedisServer;

namespace {

// Sends `request` on a new connection, then reads until the server closes it or 2 s pass
// without a byte; returns everything read.
std::string send_and_read(int port, const std::string& request) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    timeval timeout{2, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    for (size_t sent = 0; sent < request.size();) {
        const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) break;  // the server may close before taking it all (header too large)
        sent += static_cast<size_t>(n);
    }
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
    ::close(fd);
    return out;
}

size_t count(const std::string& text, const std::string& needle) {
    size_t n = 0;
    for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
    return n;
}

}  // namespace

TEST_CASE("metrics: requests that cannot be read are answered, then the connection closes",
          "[hardening][metrics]") {
    auto& server = RedisServer::shared();
    server.flushall();
    kiqd::LoggingConfig logging;
    logging.level = "off";
    auto log = kiqd::make_logger(logging, false);
    kiqd::test::LoopbackMetricsServer ms(server.options(), *log);
    const int port = ms.port();

    // Malformed: a method with a character no token may hold. Answered, then closed.
    std::string r = send_and_read(port, "G@T /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(r.rfind("HTTP/1.1 400 Bad Request\r\n", 0) == 0);
    CHECK(r.find("Connection: close") != std::string::npos);

    r = send_and_read(port,
                      "GET /healthz HTTP/1.1\r\nX-Big: " + std::string(9000, 'a') + "\r\n\r\n");
    CHECK(r.rfind("HTTP/1.1 431 ", 0) == 0);

    r = send_and_read(port, "POST /metrics HTTP/1.1\r\nContent-Length: 10000000\r\n\r\nxxxx");
    CHECK(r.rfind("HTTP/1.1 413 ", 0) == 0);

    // An unknown method is a well-formed request: 405, and the next request on the same
    // connection is served (the second asks to close, which ends the exchange).
    r = send_and_read(port,
                      "BREW /pot HTTP/1.1\r\nHost: x\r\n\r\n"
                      "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    CHECK(r.rfind("HTTP/1.1 405 ", 0) == 0);
    CHECK(count(r, "HTTP/1.1 200 OK\r\n") == 1);

    // Versions other than 1.0 and 1.1 are malformed.
    r = send_and_read(port, "GET /healthz HTTP/9.9\r\nConnection: close\r\n\r\n");
    CHECK(r.rfind("HTTP/1.1 400 ", 0) == 0);
    r = send_and_read(port, "GET /healthz HTTP/1.0\r\n\r\n");
    CHECK(r.rfind("HTTP/1.0 200 OK\r\n", 0) == 0);
    ms.stop();
}
