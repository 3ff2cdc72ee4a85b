#include "server/systemd_notify.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace kiqd {

SystemdNotifier::SystemdNotifier(std::string socket_path,
                                 std::optional<std::chrono::microseconds> watchdog)
    : path_(std::move(socket_path)), watchdog_(watchdog) {
    // Only absolute paths and abstract names are valid NOTIFY_SOCKET values; anything else is
    // ignored, as sd_notify does.
    if (path_.empty() || (path_[0] != '/' && path_[0] != '@')) return;
    if (path_.size() >= sizeof(sockaddr_un::sun_path)) return;
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
}

SystemdNotifier::SystemdNotifier(SystemdNotifier&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      watchdog_(std::exchange(other.watchdog_, std::nullopt)) {}

SystemdNotifier& SystemdNotifier::operator=(SystemdNotifier&& other) noexcept {
    if (this != &other) {
        if (fd_ >= 0) ::close(fd_);
        path_ = std::move(other.path_);
        fd_ = std::exchange(other.fd_, -1);
        watchdog_ = std::exchange(other.watchdog_, std::nullopt);
    }
    return *this;
}

SystemdNotifier::~SystemdNotifier() {
    if (fd_ >= 0) ::close(fd_);
}

SystemdNotifier SystemdNotifier::from_environment() {
    const char* socket = std::getenv("NOTIFY_SOCKET");
    std::optional<std::chrono::microseconds> watchdog;
    if (const char* usec = std::getenv("WATCHDOG_USEC")) {
        char* end = nullptr;
        errno = 0;
        const unsigned long long v = std::strtoull(usec, &end, 10);
        bool for_us = true;
        if (const char* pid = std::getenv("WATCHDOG_PID"))
            for_us = std::strtoll(pid, nullptr, 10) == static_cast<long long>(::getpid());
        if (errno == 0 && end != usec && *end == '\0' && v > 0 && for_us)
            watchdog = std::chrono::microseconds(v);
    }
    SystemdNotifier n(socket ? socket : "", watchdog);
    ::unsetenv("NOTIFY_SOCKET");
    ::unsetenv("WATCHDOG_USEC");
    ::unsetenv("WATCHDOG_PID");
    if (!n.enabled()) n.watchdog_.reset();  // nobody to ping
    return n;
}

bool SystemdNotifier::notify(std::string_view message) const {
    if (fd_ < 0) return false;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path_.data(), path_.size());
    socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path_.size());
    if (path_[0] == '@') addr.sun_path[0] = '\0';  // abstract namespace: no trailing NUL
    const ssize_t sent = ::sendto(fd_, message.data(), message.size(), MSG_NOSIGNAL,
                                  reinterpret_cast<const sockaddr*>(&addr), len);
    return sent == static_cast<ssize_t>(message.size());
}

}  // namespace kiqd
