// A reply of an unexpected type must cost the connection its socket: a server (or anything that
// wrote into the socket) that sent one reply too many puts every later reply one command late,
// and the type error is the only sign of it. A fake Redis on loopback answers GET with two
// replies; the PING after it must get its own answer, on a new connection.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <string>
#include <thread>

#include "kiqd/redis/connection.hpp"

namespace {

// Accepts connections one after another on 127.0.0.1 and answers each command read: GET with
// an integer and then a stray bulk string, anything else (PING) with +PONG.
class FakeRedis {
  public:
    FakeRedis() : listener_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&a), len) == 0);
        REQUIRE(::listen(listener_, 4) == 0);
        REQUIRE(::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
        port_ = ntohs(a.sin_port);
        thread_ = std::thread([this] { serve(); });
    }
    ~FakeRedis() {
        ::shutdown(listener_, SHUT_RDWR);  // wakes accept()
        thread_.join();
        ::close(listener_);
    }
    int port() const { return port_; }
    int connections() const { return connections_; }

  private:
    void serve() {
        for (;;) {
            const int c = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
            if (c < 0) return;
            ++connections_;
            char buf[4096];
            for (ssize_t n; (n = ::read(c, buf, sizeof buf)) > 0;) {
                const std::string command(buf, static_cast<size_t>(n));
                const std::string answer = command.find("GET") != std::string::npos
                                               ? ":42\r\n$5\r\nstray\r\n"
                                               : "+PONG\r\n";
                (void)!::write(c, answer.data(), answer.size());
            }
            ::close(c);
        }
    }

    int listener_;
    int port_ = 0;
    std::atomic<int> connections_{0};
    std::thread thread_;
};

}  // namespace

TEST_CASE("redis: a reply of the wrong type makes the next command reconnect", "[redis]") {
    FakeRedis fake;
    kiqd::redis::ConnectionOptions options;
    options.endpoint.host = "127.0.0.1";
    options.endpoint.port = fake.port();
    kiqd::redis::Connection conn(options);
    auto reply = conn.command({"GET", "k"});
    CHECK_THROWS_AS(reply.str(), kiqd::redis::ProtocolError);
    // Not the stray "stray" that was left on the old socket: PING's own answer.
    CHECK(conn.command({"PING"}).str() == "PONG");
    CHECK(fake.connections() == 2);
    // Nested replies report a wrong type the same way.
    auto pipelined = conn.pipeline({{"GET", "k"}});
    CHECK_THROWS_AS(pipelined[0][0], kiqd::redis::ProtocolError);
    CHECK(conn.command({"PING"}).str() == "PONG");
    CHECK(fake.connections() == 3);
}
