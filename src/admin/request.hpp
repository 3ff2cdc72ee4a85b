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
                          // paused, busy, scheduled, queue, job, top
    std::string action;   // retries/dead: list (default), retry, delete, kill (retries);
                          // pause/resume: worker, queue; queue: ls, clear
    std::vector<std::string> targets;  // JIDs (retries/dead/job), identities (quiet/stop), or
                                       // the class/queue name (pause/resume/queue)
    std::string job_class;             // --class
    bool all = false;                  // --all
    bool stale = false;                // --stale (unique locks)
    bool json = false;                 // --json
    std::optional<size_t> limit;       // --limit (listings)
    bool no_headers = false;           // --no-headers: tables without their header row, and
                                       // no "Redis ..." line
    bool yes = false;                  // --yes: no confirmation asked (queue clear)
    double interval = 2.0;             // --interval (top), seconds between refreshes
    // Where the Redis URL came from ("-C /etc/x.yml", "REDIS_URL", ...), for the "Redis ..."
    // line that text output starts with (admin/config_source.hpp).
    std::string redis_source;
    std::string redis_endpoint;  // set by run_admin: the endpoint, without credentials
};

class NotFound : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

}  // namespace kiqd::admin
