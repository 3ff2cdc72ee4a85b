#include "support/redis_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>
#include <thread>

namespace kiqd::test {

int free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ::close(fd);
    return ntohs(addr.sin_port);
}

std::string kiqd_config(const RedisServer& server, const std::string& extra) {
    return "redis: {url: " + server.url() + "}\npoll_interval_average: 0.5\n" + extra;
}

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        if (pred()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return pred();
}

RedisServer::RedisServer() : port_(free_port()) {
    start();
}

RedisServer::~RedisServer() {
    stop();
}

redis::ConnectionOptions RedisServer::options() const {
    redis::ConnectionOptions o;
    o.endpoint.host = "127.0.0.1";
    o.endpoint.port = port_;
    return o;
}

void RedisServer::start() {
    const std::string port = std::to_string(port_);
    pid_ = ::fork();
    if (pid_ == 0) {
        ::execlp("redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--loglevel", "warning", "--logfile",
                 "/dev/null", static_cast<char*>(nullptr));
        ::_exit(127);
    }
    if (pid_ < 0) throw std::runtime_error("fork failed");
    const bool up = wait_until(
        [&] {
            try {
                auto c = connect();
                return c.command({"PING"}).str() == "PONG";
            } catch (const redis::Error&) {
                return false;
            }
        },
        std::chrono::seconds(5));
    if (!up) throw std::runtime_error("redis-server did not start on port " + port);
}

void RedisServer::stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
}

void RedisServer::flushall() const {
    auto c = connect();
    c.command({"FLUSHALL"});
    c.command({"SCRIPT", "FLUSH"});
}

RedisServer& RedisServer::shared() {
    static RedisServer server;
    return server;
}

}  // namespace kiqd::test
