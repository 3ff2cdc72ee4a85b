#pragma once
// One admin invocation as parsed from the command line (Request), and how a command reports
// that what it was asked about does not exist (NotFound: run_admin prints it and exits 1).
// The admin CLI is single-threaded.
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiqd::admin {

struct Request {
    std::string command;  // stats, queues, processes, retries, dead, quiet, stop, pause, resume,
                          // paused
    std::string action;   // retries/dead: list (default), retry, delete; pause/resume: worker,
                          // queue
    std::vector<std::string> targets;  // JIDs (retries/dead), identities (quiet/stop), or the
                                       // class/queue name (pause/resume)
    std::string job_class;             // --class
    bool all = false;                  // --all
    bool stale = false;                // --stale (unique locks)
    bool json = false;                 // --json
    std::optional<size_t> limit;       // --limit (listings)
};

class NotFound : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

}  // namespace kiqd::admin
