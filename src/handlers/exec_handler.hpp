#pragma once
// Exec handlers: a job class run by an external command, configured in the YAML as
//
//   handlers:
//     ResizeImage:
//       exec: ["/usr/bin/python3", "/opt/jobs/resize.py"]
//       timeout: 30   # seconds; default: the shutdown timeout
//       grace: 5      # seconds between SIGTERM and SIGKILL after a timeout (default 5)
//
// Per job, kiqd starts the command directly (child_spawn.hpp: no shell, dies with kiqd) in its own
// process group, writes the whole job payload (the raw JSON string) to its stdin and closes it, and
// sets KIQD_JID, KIQD_CLASS, KIQD_QUEUE and KIQD_RETRY_COUNT (empty before the first retry) on top
// of kiqd's own environment minus kiqd's secrets (child_environment.hpp). stdout and stderr are
// logged line by line with the jid.
//   exit 0                  → success
//   other exit or a signal  → JobError "Kiqd::ExecError": the status and the last stderr lines
//   runs past `timeout`     → SIGTERM to the group, SIGKILL after `grace`; "Kiqd::Timeout"
//   cannot be started       → "Kiqd::ExecError" naming the command and errno
//   kiqd's hard shutdown    → SIGTERM to the group (SIGKILL after 2 s, also for a command that
//                             had timed out); exit 0 within that grace → success (the job is
//                             done); otherwise kiqd::Interrupted, and the processor puts the job
//                             back in its queue only now that the command is gone
// Every child is reaped. The child gets descriptors 0-2 and nothing else: every descriptor kiqd
// opens is close-on-exec, and the child closes all above 2 before exec in any case.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "kiqd/config.hpp"
#include "kiqd/handler_registry.hpp"

namespace kiqd {

struct ExecLimits {
    size_t stderr_tail_lines = 20;                   // lines of stderr kept for error_message
    size_t stderr_tail_bytes = 4096;                 // and at most this many bytes of them
    size_t max_log_line_bytes = 8192;                // longer output lines are logged in pieces
    std::chrono::milliseconds shutdown_grace{2000};  // SIGTERM → SIGKILL on a hard shutdown
};

// The handler for one `handlers:` entry. `default_timeout` applies when the spec has none.
// `secrets` (kiqd_secrets): environment variables whose value contains one are not passed on.
Handler make_exec_handler(const ExecHandlerSpec& spec, std::chrono::milliseconds default_timeout,
                          ExecLimits limits = {}, const std::vector<std::string>& secrets = {});

// Whether `handler` was made by make_exec_handler. Its normal return means the command exited 0,
// even after kiqd's hard-shutdown stop signal (the processor then records the job as done
// instead of requeueing it, as it does for an in-process handler that returns after the stop).
bool is_exec_handler(const Handler& handler);

// SIGKILL to the process group of every command still running: for a process about to exit
// while threads are stuck past the shutdown grace (a command must not outlive its job's requeue).
void kill_exec_children() noexcept;

// Registers every `handlers:` entry of the config (replacing handlers of the same name).
void register_exec_handlers(const Config& config, HandlerRegistry& registry);

// Why the command of `spec` could not be started, or nullopt when argv[0] resolves to an
// executable file (looked up in PATH when it has no '/'). For check-config and startup warnings.
std::optional<std::string> exec_command_problem(const ExecHandlerSpec& spec);

}  // namespace kiqd
