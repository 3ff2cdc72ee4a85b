#pragma once
// SystemdNotifier: the sd_notify protocol (systemd.service(5) Type=notify, sd_notify(3)),
// implemented directly on a unix datagram socket instead of linking libsystemd: it is one
// sendto() per message, and kiqd stays free of a dependency that containers and non-systemd
// hosts do not need.
//
// from_environment() reads NOTIFY_SOCKET (a path, or "@name" for the abstract namespace),
// WATCHDOG_USEC and WATCHDOG_PID, then removes the three variables from the environment (as
// sd_notify(unset_environment=1) does), so that exec-handler children neither inherit them nor
// talk to systemd in kiqd's name. Call it before any thread that reads the environment starts.
// With no NOTIFY_SOCKET every call is a no-op. The watchdog applies to this process only when
// WATCHDOG_PID is unset or equals getpid() (sd_watchdog_enabled(3)).
//
// Thread safety: notify() may be called from any thread (one sendto on a socket that is only
// read after construction).
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace kiqd {

class SystemdNotifier {
  public:
    SystemdNotifier() = default;  // disabled
    explicit SystemdNotifier(std::string socket_path,
                             std::optional<std::chrono::microseconds> watchdog = std::nullopt);
    SystemdNotifier(SystemdNotifier&& other) noexcept;
    SystemdNotifier& operator=(SystemdNotifier&& other) noexcept;
    SystemdNotifier(const SystemdNotifier&) = delete;
    SystemdNotifier& operator=(const SystemdNotifier&) = delete;
    ~SystemdNotifier();

    static SystemdNotifier from_environment();

    bool enabled() const { return fd_ >= 0; }
    // Sends one message ("READY=1", "STATUS=...", newline-separated assignments). Returns false
    // when disabled or when the send failed (systemd gone: nothing to do about it).
    bool notify(std::string_view message) const;
    // The watchdog timeout systemd expects pings within; ping every half of it.
    std::optional<std::chrono::microseconds> watchdog() const { return watchdog_; }

  private:
    std::string path_;
    int fd_ = -1;
    std::optional<std::chrono::microseconds> watchdog_;
};

}  // namespace kiqd
