#include "support/redis_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
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

long long llen(redis::Connection& c, const std::string& key) {
    return c.command({"LLEN", key}).integer();
}

namespace {
std::vector<std::string> strings(const redis::Reply& r) {
    std::vector<std::string> out;
    for (size_t i = 0; i < r.size(); ++i) out.emplace_back(r[i].str());
    return out;
}
}  // namespace

std::vector<std::string> lrange(redis::Connection& c, const std::string& key) {
    return strings(c.command({"LRANGE", key, "0", "-1"}));
}

std::vector<std::string> zrange(redis::Connection& c, const std::string& key) {
    return strings(c.command({"ZRANGE", key, "0", "-1"}));
}

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        if (pred()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return pred();
}

RedisServer::RedisServer(std::vector<std::string> extra_args)
    : port_(free_port()), extra_args_(std::move(extra_args)) {
    for (size_t i = 0; i + 1 < extra_args_.size(); ++i)
        if (extra_args_[i] == "--requirepass") password_ = extra_args_[i + 1];
    char tmpl[] = "/tmp/kiqd-redis-XXXXXX";
    if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    start();
}

RedisServer::~RedisServer() {
    stop();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
}

redis::ConnectionOptions RedisServer::options() const {
    redis::ConnectionOptions o;
    o.endpoint.host = "127.0.0.1";
    o.endpoint.port = port_;
    o.endpoint.password = password_;
    return o;
}

void RedisServer::start() {
    const std::string port = std::to_string(port_);
    std::vector<std::string> args = {
        "redis-server", "--port",     port,      "--bind",    "127.0.0.1",
        "--dir",        dir_,         "--save",  "",          "--appendonly",
        "no",           "--loglevel", "warning", "--logfile", "/dev/null"};
    args.insert(args.end(), extra_args_.begin(), extra_args_.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
        ::execvp("redis-server", argv.data());
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
    wait_exit();
}

void RedisServer::kill9() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    wait_exit();
}

void RedisServer::wait_exit() {
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
