#include "support/redis_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>

#include "support/test_child.hpp"
#include "support/tls_certs.hpp"
#include "support/wait_until.hpp"

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
    return "redis: {url: " + server.url() + server.tls_yaml() + "}\npoll_interval_average: 0.5\n" +
           extra;
}

std::string default_queue_config(const RedisServer& server, const std::string& extra) {
    return kiqd_config(server, "queues: [default]\n" + extra);
}

std::string await_started(pid_t pid, const redis::ConnectionOptions& options) {
    int status = 0;
    bool exited = false;
    const bool answering = wait_until(
        [&] {
            if (::waitpid(pid, &status, WNOHANG) == pid) exited = true;
            if (exited) return true;
            try {
                // Its own answer, not another server's: a port picked free (free_port) can be
                // taken by someone else before this server binds it, and then this one exits.
                redis::Connection c(options);
                const std::string info(c.command({"INFO", "server"}).str());
                return info.find("\nprocess_id:" + std::to_string(pid) + "\r") != std::string::npos;
            } catch (const redis::Error&) {
                return false;
            }
        },
        std::chrono::seconds(60));
    if (answering && !exited) return "";
    if (exited)
        return WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                 : "was killed by signal " + std::to_string(WTERMSIG(status));
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    return "did not answer INFO with its own process id in 60 s";
}

RedisServer::RedisServer(std::vector<std::string> extra_args)
    : port_(free_port()), extra_args_(std::move(extra_args)) {
    for (size_t i = 0; i + 1 < extra_args_.size(); ++i)
        if (extra_args_[i] == "--requirepass") password_ = extra_args_[i + 1];
    start();
}

RedisServer::RedisServer(std::vector<std::string> extra_args, TlsMode tls)
    : port_(free_port()), extra_args_(std::move(extra_args)) {
    const auto& certs = TestCerts::shared();
    const auto args = certs.server_args(port_, tls.leaf, tls.auth_clients);
    extra_args_.insert(extra_args_.begin(), args.begin(), args.end());
    for (size_t i = 0; i + 1 < extra_args_.size(); ++i)
        if (extra_args_[i] == "--requirepass") password_ = extra_args_[i + 1];
    // A server with a bad certificate is still reached by the fixture (readiness, seeding).
    tls_ =
        tls.leaf == "server" ? certs.client(tls.auth_clients) : certs.unverified(tls.auth_clients);
    tls_yaml_ = ", " + certs.yaml(tls.auth_clients);
    start();
}

RedisServer::~RedisServer() {
    stop();  // dir_ goes after this, with the server's files
}

redis::ConnectionOptions RedisServer::options() const {
    redis::ConnectionOptions o;
    o.endpoint.host = "127.0.0.1";
    o.endpoint.port = port_;
    o.endpoint.password = password_;
    o.endpoint.tls = tls_ != nullptr;
    o.tls = tls_;
    return o;
}

void RedisServer::start() {
    const std::string port = std::to_string(port_);
    std::vector<std::string> args = {
        "redis-server", "--port",     port,      "--bind",    "127.0.0.1",
        "--dir",        dir_.path(),  "--save",  "",          "--appendonly",
        "no",           "--loglevel", "warning", "--logfile", "/dev/null"};
    args.insert(args.end(), extra_args_.begin(), extra_args_.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork_test_child();
    if (pid_ == 0) {
        ::execvp("redis-server", argv.data());
        ::_exit(127);
    }
    if (pid_ < 0) throw std::runtime_error("fork failed");
    // A slow start must not be cut short: a constructor that throws removes dir_ while the server
    // may still be reading its options. await_started reaps the child whenever it fails.
    const std::string failure = await_started(pid_, options());
    if (!failure.empty()) {
        pid_ = -1;
        throw std::runtime_error("redis-server on port " + port + " " + failure);
    }
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
