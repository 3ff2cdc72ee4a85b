#include "handlers/exec_handler.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

#include "common/log_fields.hpp"
#include "common/outcome_counters.hpp"
#include "handlers/child_environment.hpp"
#include "handlers/child_output.hpp"
#include "handlers/child_spawn.hpp"
#include "handlers/group_keeper.hpp"
#include "handlers/unique_fd.hpp"
#include "kiqd/deadline.hpp"

extern char** environ;

namespace kiqd {
namespace {

using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Pipe {
    Fd read, write;
};

Pipe make_pipe() {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0)
        throw JobError("Kiqd::ExecError",
                       std::string("cannot create a pipe: ") + std::strerror(errno));
    return {Fd(p[0]), Fd(p[1])};
}

std::string seconds_text(milliseconds d) {
    return fmt::format("{:g}s", std::chrono::duration<double>(d).count());
}

bool is_executable_file(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
           ::access(path.c_str(), X_OK) == 0;
}

// The process groups of every command running now, so that a process about to exit can kill
// what its stuck threads could not (kill_exec_children). Any thread.
struct LiveGroups {
    std::mutex mutex;
    std::set<pid_t> groups;
};
LiveGroups& live_groups() {
    static auto* groups = new LiveGroups;  // never destroyed: used until _Exit
    return *groups;
}

// A started child: killed (whole group) and reaped when it goes out of scope unreaped, so no
// exception path leaves a zombie or a stray process behind.
class Child {
  public:
    explicit Child(pid_t pid) : pid_(pid) {
        std::lock_guard lock(live_groups().mutex);
        live_groups().groups.insert(pid_);
    }
    ~Child() {
        if (!reaped_) {
            ::kill(-pid_, SIGKILL);
            int status;
            while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
            }
        }
        forget();
    }
    pid_t pid() const { return pid_; }
    bool reaped() const { return reaped_; }
    int status() const { return status_; }
    // Non-blocking reap; true once the child has exited.
    bool try_reap() {
        if (reaped_) return true;
        int status;
        pid_t r = ::waitpid(pid_, &status, WNOHANG);
        if (r == pid_) {
            reaped_ = true;
            status_ = status;
            forget();
        }
        return reaped_;
    }
    // The whole process group (the child is its leader); falls back to the child alone.
    void signal(int sig) const {
        if (::kill(-pid_, sig) != 0) ::kill(pid_, sig);
    }

  private:
    // Once reaped, the group id may be reused by an unrelated process: never signal it again.
    void forget() {
        if (forgotten_) return;  // once: the id may already belong to another command
        forgotten_ = true;
        {
            std::lock_guard lock(live_groups().mutex);
            live_groups().groups.erase(pid_);
        }
        release_process_group(pid_);
    }

    pid_t pid_;
    bool reaped_ = false;
    bool forgotten_ = false;
    int status_ = 0;
};

class ExecRunner {
  public:
    ExecRunner(ExecHandlerSpec spec, milliseconds timeout, ExecLimits limits,
               const std::vector<std::string>& secrets)
        : spec_(std::move(spec)),
          timeout_(timeout),
          limits_(limits),
          base_env_(child_environment(environ, secrets)) {
        command_line_ = fmt::format("{}", fmt::join(spec_.argv, " "));
    }

    void operator()(const Job& job, JobContext& ctx) const;

  private:
    ExecHandlerSpec spec_;
    milliseconds timeout_;
    ExecLimits limits_;
    std::vector<std::string> base_env_;
    std::string command_line_;
};

void ExecRunner::operator()(const Job& job, JobContext& ctx) const {
    // argv and envp for the child; built before anything is started.
    std::vector<std::string> env = base_env_;
    env.push_back("KIQD_JID=" + job.jid);
    env.push_back("KIQD_CLASS=" + job.handler_name());
    env.push_back("KIQD_QUEUE=" + job.queue);
    const auto retry = job.retry_count();
    env.push_back("KIQD_RETRY_COUNT=" + (retry ? std::to_string(*retry) : std::string()));
    std::vector<char*> envp, argv;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = spec_.argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    Pipe in = make_pipe(), out = make_pipe(), err = make_pipe();

    // Descriptors 0-2 only, own process group, default signals, and death with kiqd
    // (handlers/child_spawn.hpp). Every descriptor kiqd opens is close-on-exec, but not every one
    // is born so (hiredis's sockets are marked just after connect, a plugin's are beyond kiqd's
    // control, a descriptor inherited from kiqd's own parent is not kiqd's), so the child also
    // closes everything above 2 before exec.
    const SpawnedChild spawned =
        spawn_child(argv.data(), envp.data(), in.read.get(), out.write.get(), err.write.get());
    if (spawned.error != 0) {
        throw JobError(
            "Kiqd::ExecError",
            fmt::format("cannot start {}: {}", spec_.argv[0], std::strerror(spawned.error)),
            {"exec: " + command_line_});
    }
    const pid_t pid = spawned.pid;
    Child child(pid);
    in.read.reset();
    out.write.reset();
    err.write.reset();
    set_nonblocking(in.write.get());
    set_nonblocking(out.read.get());
    set_nonblocking(err.read.get());
    Fd pidfd(open_pidfd(pid));
    ctx.log.debug("class={} jid={} started pid {}: {}", job.display_class(), job.jid, pid,
                  command_line_);

    std::deque<std::string> stderr_tail;
    LineSink out_sink("stdout", limits_.max_log_line_bytes, &ctx.log);
    LineSink err_sink("stderr", limits_.max_log_line_bytes, &ctx.log, &stderr_tail,
                      limits_.stderr_tail_lines, limits_.stderr_tail_bytes);
    const LineLabels labels{job.display_class(), job.jid, {}, 0};

    const std::string& payload = job.raw;
    size_t written = 0;
    if (payload.empty()) in.write.reset();

    enum class Phase { running, timed_out, stopping } phase = Phase::running;
    const auto started = Steady::now();
    const auto deadline = saturating_deadline(started, timeout_);
    auto kill_at = Steady::time_point::max();
    bool killed = false;
    bool stop_seen = false;  // kiqd's hard-shutdown signal has been acted on
    auto drain_until = Steady::time_point::max();
    char buf[65536];

    auto read_from = [&](Fd& fd, LineSink& sink) {
        // A bounded number of reads per wake, so that a command flooding its output cannot
        // keep the loop from its deadlines.
        for (int reads = 0; reads < 16; ++reads) {
            ssize_t n = ::read(fd.get(), buf, sizeof buf);
            if (n > 0) {
                sink.feed(buf, static_cast<size_t>(n), labels);
                if (static_cast<size_t>(n) < sizeof buf) return;
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && errno == EAGAIN) return;
            fd.reset();  // EOF or error
            return;
        }
    };

    for (;;) {
        const auto now = Steady::now();
        if (child.reaped()) {
            if ((!out.read.open() && !err.read.open()) || now >= drain_until) break;
        } else if (!stop_seen && ctx.stop.stop_requested()) {
            // Hard shutdown: the command is stopped before its job goes back to the queue (the
            // processor requeues it once this returns), so that no other process can start the
            // job while this command still runs. A command already timed out keeps its SIGTERM
            // but gets no longer than the shutdown grace before SIGKILL.
            stop_seen = true;
            if (phase == Phase::running) {
                phase = Phase::stopping;
                child.signal(SIGTERM);
                kill_at = saturating_deadline(now, limits_.shutdown_grace);
            } else if (!killed) {
                kill_at = std::min(kill_at, saturating_deadline(now, limits_.shutdown_grace));
            }
        } else if (phase == Phase::running && now >= deadline) {
            if (child.try_reap()) {
                // It has ended on its own while this thread was not running (a VM pause, a
                // loaded machine) and its exit was not seen yet: it ends as it ended, not as a
                // timeout (nothing was signalled, and a retry would run a finished job again).
                in.write.reset();
                drain_until = now + milliseconds(200);
                continue;
            }
            phase = Phase::timed_out;
            child.signal(SIGTERM);
            kill_at = saturating_deadline(now, spec_.grace);
        } else if (phase != Phase::running && !killed && now >= kill_at) {
            killed = true;
            child.signal(SIGKILL);
        }

        // Wake for output, for the child's exit (pidfd), and at least every 100 ms to see a
        // shutdown; sooner for the next deadline.
        auto wake = now + milliseconds(100);
        if (phase == Phase::running)
            wake = std::min(wake, deadline);
        else if (!killed)
            wake = std::min(wake, kill_at);
        int timeout_ms = static_cast<int>(
            std::max<long long>(0, std::chrono::ceil<milliseconds>(wake - now).count()));
        if (child.reaped())
            timeout_ms = 0;
        else if (!pidfd.open() && !out.read.open() && !err.read.open())
            timeout_ms = std::min(timeout_ms, 5);  // no pidfd: poll waitpid

        pollfd fds[4];
        int n = 0, in_i = -1, out_i = -1, err_i = -1, pid_i = -1;
        if (in.write.open()) {
            in_i = n;
            fds[n++] = {in.write.get(), POLLOUT, 0};
        }
        if (out.read.open()) {
            out_i = n;
            fds[n++] = {out.read.get(), POLLIN, 0};
        }
        if (err.read.open()) {
            err_i = n;
            fds[n++] = {err.read.get(), POLLIN, 0};
        }
        if (pidfd.open() && !child.reaped()) {
            pid_i = n;
            fds[n++] = {pidfd.get(), POLLIN, 0};
        }
        const int ready = ::poll(fds, static_cast<nfds_t>(n), timeout_ms);
        if (ready < 0 && errno != EINTR)
            throw JobError("Kiqd::ExecError", std::string("poll: ") + std::strerror(errno));
        if (ready <= 0) {
            if (child.reaped()) break;  // exited and nothing more to read right now
            if (!pidfd.open()) child.try_reap();
            continue;
        }
        if (in_i >= 0 && fds[in_i].revents) {
            if (fds[in_i].revents & (POLLERR | POLLHUP)) {
                in.write.reset();  // the command does not read its stdin: not an error
            } else {
                ssize_t w =
                    ::write(in.write.get(), payload.data() + written, payload.size() - written);
                if (w > 0)
                    written += static_cast<size_t>(w);
                else if (w < 0 && errno != EAGAIN && errno != EINTR)
                    in.write.reset();
                if (written == payload.size()) in.write.reset();
            }
        }
        if (out_i >= 0 && fds[out_i].revents) read_from(out.read, out_sink);
        if (err_i >= 0 && fds[err_i].revents) read_from(err.read, err_sink);
        if ((pid_i >= 0 && fds[pid_i].revents) || !pidfd.open()) {
            if (child.try_reap()) {
                in.write.reset();
                // Output still buffered in the pipes is read; descendants that keep them open
                // are not waited for beyond a short drain.
                drain_until = Steady::now() + milliseconds(200);
            }
        }
    }
    out_sink.finish(labels);
    err_sink.finish(labels);

    const double elapsed = std::chrono::duration<double>(Steady::now() - started).count();
    auto tail_text = [&] {
        if (stderr_tail.empty()) return std::string();
        return fmt::format("; stderr: {}", fmt::join(stderr_tail, "\n"));
    };
    const int status = child.status();
    std::vector<std::string> backtrace{"exec: " + command_line_};
    if (phase == Phase::stopping) {
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            // It finished within the grace: the job is done, not interrupted.
            ctx.log.info("class={} jid={} command pid {} finished during the shutdown grace",
                         job.display_class(), job.jid, pid);
            return;
        }
        ctx.log.info("class={} jid={} command pid {} stopped by shutdown after {:.3f} s{}",
                     job.display_class(), job.jid, pid, elapsed, killed ? " (SIGKILL)" : "");
        throw Interrupted();
    }
    if (phase == Phase::timed_out) {
        increment(outcome_counters().exec_timeouts);
        throw JobError(
            "Kiqd::Timeout",
            fmt::format("{} did not finish within {} (pid {}; sent SIGTERM{})", spec_.argv[0],
                        seconds_text(timeout_), pid,
                        killed ? ", then SIGKILL after " + seconds_text(spec_.grace) : "") +
                tail_text(),
            std::move(backtrace));
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
    throw JobError("Kiqd::ExecError",
                   fmt::format("{} {}", spec_.argv[0], describe_wait_status(status)) + tail_text(),
                   std::move(backtrace));
}

// The Handler of an exec entry: a named type, so that is_exec_handler can recognise it.
struct ExecHandler {
    std::shared_ptr<const ExecRunner> runner;
    void operator()(const Job& job, JobContext& ctx) const { (*runner)(job, ctx); }
};

}  // namespace

Handler make_exec_handler(const ExecHandlerSpec& spec, milliseconds default_timeout,
                          ExecLimits limits, const std::vector<std::string>& secrets) {
    if (spec.argv.empty()) throw ConfigError("handlers." + spec.job_class + ".exec", "is empty");
    // A child that exits before reading its stdin must not kill kiqd with SIGPIPE: writes
    // then fail with EPIPE instead. (Children get the default disposition back at exec.)
    std::signal(SIGPIPE, SIG_IGN);
    return ExecHandler{std::make_shared<const ExecRunner>(
        spec, spec.timeout.value_or(default_timeout), limits, secrets)};
}

bool is_exec_handler(const Handler& handler) {
    return handler.target<ExecHandler>() != nullptr;
}

void kill_exec_children() noexcept {
    std::lock_guard lock(live_groups().mutex);
    for (pid_t group : live_groups().groups) ::kill(-group, SIGKILL);
}

void register_exec_handlers(const Config& config, HandlerRegistry& registry) {
    const auto secrets = kiqd_secrets(config);
    for (const auto& spec : config.exec_handlers)
        registry.add(spec.job_class, make_exec_handler(spec, config.timeout, {}, secrets));
}

std::optional<std::string> exec_command_problem(const ExecHandlerSpec& spec) {
    if (spec.argv.empty()) return "no command";
    const std::string& cmd = spec.argv[0];
    if (cmd.find('/') != std::string::npos) {
        struct stat st {};
        if (::stat(cmd.c_str(), &st) != 0) return fmt::format("{}: {}", cmd, std::strerror(errno));
        if (!S_ISREG(st.st_mode)) return fmt::format("{}: not a regular file", cmd);
        if (::access(cmd.c_str(), X_OK) != 0) return fmt::format("{}: not executable", cmd);
        return std::nullopt;
    }
    const char* path_env = std::getenv("PATH");
    std::string path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
    size_t start = 0;
    for (;;) {
        size_t colon = path.find(':', start);
        std::string dir = path.substr(start, colon == std::string::npos ? colon : colon - start);
        if (dir.empty()) dir = ".";
        if (is_executable_file(dir + "/" + cmd)) return std::nullopt;
        if (colon == std::string::npos) break;
        start = colon + 1;
    }
    return fmt::format("{}: not found in PATH", cmd);
}

}  // namespace kiqd
