#pragma once
// Config: everything kiqd reads from YAML and the command line, with Sidekiq's defaults.
// Accepts Sidekiq's own sidekiq.yml shape (":concurrency:", ":queues:" as names or
// [name, weight] pairs, environment sub-hashes, the common <%= ENV[...] %> ERB forms) plus
// kiqd's keys. Every problem is a ConfigError naming the key (and the line when known);
// main() turns it into exit code 78 (EX_CONFIG) before anything touches Redis.
// Built once on the main thread, then read-only.
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiqd/clock.hpp"
#include "kiqd/redis/endpoint.hpp"
#include "kiqd/redis/sentinel.hpp"
#include "kiqd/worker_metadata.hpp"
#include "kiqd/worker_selector.hpp"

namespace kiqd {

// One entry of `queues:` ("name" or "name,weight"); fetch/queue_order.hpp turns the list into
// the order a fetch asks Redis in.
struct QueueWeight {
    std::string name;
    int weight = 0;  // 0 = given without a weight
};

// One of Sidekiq 7's `capsules:` (`capsules: {reports: {concurrency: 2, queues: [reports]}}`):
// its own queues (weighted or strict, as `queues:`), its own processor threads and fetcher, in
// this process. The top-level `queues:` and `concurrency:` are the "default" capsule.
struct CapsuleConfig {
    std::string name;
    std::vector<QueueWeight> queues;
    int concurrency = 0;
    int line = -1;
};

class ConfigError : public std::runtime_error {
  public:
    ConfigError(std::string key, std::string message, int line = -1);
    const std::string& key() const { return key_; }
    int line() const { return line_; }  // 1-based, -1 when unknown

  private:
    std::string key_;
    int line_;
};

struct RedisConfig {
    std::string url;         // empty: REDIS_URL, else redis://127.0.0.1:6379/0
    std::string key_prefix;  // redis-namespace of Sidekiq 6 deployments ("ns" → "ns:queue:x")
    std::chrono::milliseconds connect_timeout{1000};
    // AUTH. The password has exactly one source: the URL, `password`, `password_file` (its
    // first line, read when the config is loaded) or `password_env` (read then too).
    std::string username;      // `username`: ACL user; empty = the URL's, else "default"
    std::string password;      // from the key named by password_key; never logged
    std::string password_key;  // "redis.password", "redis.password_file", ... ("" = none)
    int password_line = -1;
    int username_line = -1;
    // Sentinel: `sentinels`, `master_name`, `sentinel_username`, `sentinel_password`.
    redis::SentinelOptions sentinel;
    int sentinel_line = -1;
    // TLS, for a rediss:// URL: `tls: {ca_file, ca_path, cert_file, key_file, server_name,
    // verify: peer|none, min_version}`; a key the YAML does not set comes from
    // REDIS_TLS_<KEY> (REDIS_TLS_CA_FILE, ...) when that variable is set.
    redis::TlsOptions tls;
    std::map<std::string, int> tls_keys;  // each key given in the YAML ("ca_file") → its line
    int tls_line = -1;                    // line of `tls:`, -1 when absent
    // `sentinel_tls: true|false`: ask the sentinels over TLS; unset: as the URL (rediss://).
    std::optional<bool> sentinel_tls;
    int sentinel_tls_line = -1;
    // Filled by validate_config for a rediss:// URL (or sentinel_tls): the files loaded once,
    // shared by every connection. Null for plain redis://.
    std::shared_ptr<const redis::TlsContext> tls_context;
    // Filled by validate_config: the URL (or REDIS_URL) with username/password applied.
    // With sentinels its host/port are unused: the sentinels name the master.
    redis::Endpoint endpoint;
};

struct LoggingConfig {
    std::string level = "info";   // trace, debug, info, warn, error, off
    std::string format = "text";  // text | json
    std::string file;             // empty: stdout
};

struct MiddlewareSpec {
    std::string name;
    YAML::Node options;  // null when the entry is a plain name
    int line = -1;
};

// `handlers: {ClassName: {exec: [argv...], timeout: s, grace: s}}`: a job class run by an
// external command (see exec_handler.hpp).
struct ExecHandlerSpec {
    std::string job_class;
    std::vector<std::string> argv;  // argv[0]: a path, or a name looked up in PATH
    std::optional<std::chrono::milliseconds> timeout;  // unset: the shutdown timeout
    std::chrono::milliseconds grace{5000};             // SIGTERM → SIGKILL after a timeout
    int line = -1;
};

// `runners: {name: {command: [argv...], processes: N, threads: N, env: {NAME: value},
// max_jobs: N, max_rss_mb: N, boot_timeout: s}}`: a pool of long-lived worker processes
// speaking docs/runner-protocol.md (see handlers/runner_pool.hpp).
struct RunnerSpec {
    std::string name;
    std::vector<std::string> argv;
    int processes = 0;  // 0 = the number of CPUs (resolved by validate_config)
    // Jobs one process runs at once, when it can (a runner that says nothing runs one); 0 =
    // ceil(concurrency / processes), resolved by validate_config.
    int threads = 0;
    std::vector<std::pair<std::string, std::string>> env;  // `env:`, added to the app's
    long long max_jobs = 0;    // recycle a child after this many jobs; 0 = never
    long long max_rss_mb = 0;  // recycle a child whose RSS grew past this; 0 = never
    std::chrono::milliseconds boot_timeout{60000};
    bool preload = true;  // `preload: false`: kiqd starts each process; none is a forking master
    int line = -1;
};

// `handlers: {ClassName: {runner: name, timeout: s}}` and `"*": {runner: name}`: a job class
// run by a runner pool (see handlers/runner_handler.hpp). "*" is every class without another
// handler. A key that is a worker selector (`"resource_boundary=cpu": {runner: cpu}`, the syntax
// of worker_selector.hpp) is every declared class it matches that has no handler of its own;
// the first matching selector entry wins.
struct RunnerHandlerSpec {
    std::string job_class;  // a class name, "*", or a selector's text
    bool selector = false;
    std::string runner;
    std::optional<std::chrono::milliseconds> timeout;  // unset: none (shutdown still stops it)
    int line = -1;
};

// Per-class uniqueness defaults, `handlers: {ClassName: {lock: ..., lock_args: [0, 2], ...}}`
// (see unique_jobs.hpp). A job's own payload fields win over these.
struct LockDefaults {
    std::string lock;                           // canonical lock type; "" = none
    std::optional<std::vector<int>> lock_args;  // indexes into args that make the identity
    std::optional<std::chrono::milliseconds> lock_ttl;
    std::optional<std::chrono::milliseconds> lock_timeout;
    std::string on_conflict;  // "" = the lock type's default
};

// `handlers: {ClassName: {pause_control: manual | {strategy: NAME, ...options}}}` (see
// pause_strategy.hpp). Unset: the class has no strategy of its own (the operator's manual pause,
// `kiqd pause worker`, applies to every class regardless).
struct PauseControlSpec {
    std::string strategy;  // "manual", "redis_flag", "none" or a name registered from C++
    YAML::Node options;    // the map it was given in (null for the plain-name form)
    int line = -1;
};

// What a per-class rate or concurrency limit counts separately (see throttle.hpp and
// concurrency_limit.hpp): the whole class, each tenant (the payload's `fair_tenant`), or each
// value of one argument (`arg:N`, throttle only).
enum class LimitScope { job_class, tenant, arg };

// `handlers: {C: {throttle: {limit: L, period: SECONDS, by: class | tenant | "arg:N"}}}`: at
// most L runs per window of PERIOD seconds aligned to the epoch (Rack::Attack's fixed window).
struct ThrottleSpec {
    long long limit = 0;
    long long period = 0;  // whole seconds
    LimitScope by = LimitScope::job_class;
    int arg = -1;  // with LimitScope::arg: the index into args
};

// `handlers: {C: {concurrency_limit: N}}` or `{concurrency_limit: {limit: N, by: tenant}}`:
// at most N jobs of the class (or of one tenant of it) run at once across all processes.
struct ConcurrencySpec {
    long long limit = 0;
    LimitScope by = LimitScope::job_class;  // job_class or tenant
};

// One rerouting rule of sidekiq-fair_tenant (fair_tenant.hpp): more than `threshold` jobs of
// a tenant enqueued within the last `per` seconds send its next job to `queue`.
struct FairTenantRule {
    std::string queue;
    double threshold = 0;
    std::optional<double> per;  // seconds; unset: fair_tenant.max_throttling_window
};

// Everything `handlers:` says about one job class besides `exec`.
struct ClassSpec {
    std::string job_class;
    LockDefaults lock;
    int line = -1;
    std::optional<PauseControlSpec> pause_control;
    std::optional<ThrottleSpec> throttle;
    std::optional<ConcurrencySpec> concurrency_limit;
    // `queue:`: the class's queue (Sidekiq's sidekiq_options queue:) — the default of pushes
    // through kiqd's client, and the "main" queue fair-tenant rerouting moves jobs away from.
    // "" = not configured.
    std::string queue;
    // `fair_tenant_queues: [{queue, threshold, per}]` and `fair_tenant: {arg: N}` (the tenant
    // is args[N]); a job's own `fair_tenant_queues` / `fair_tenant` win (fair_tenant.hpp).
    std::vector<FairTenantRule> fair_tenant_queues;
    std::optional<int> fair_tenant_arg;
    WorkerMetadata metadata{};  // `urgency:`, `resource_boundary:`, ... (worker_metadata.hpp)
};

// `fair_tenant:` — the gem's own settings (sidekiq-fair_tenant config.rb), defaulting to the
// environment variables the gem reads (SIDEKIQ_FAIR_TENANT_MAX_THROTTLING_WINDOW,
// SIDEKIQ_FAIR_TENANT_ENQUEUES_KEY), so that Ruby and kiqd count in the same keys.
struct FairTenantConfig {
    long long max_throttling_window = 86400;  // seconds
    std::string enqueues_key = "sidekiq-fair_tenant:enqueued:%<job_class>s:tenant:%<fair_tenant>s";
    bool window_set = false;  // set by the YAML (else the environment may set it)
    bool key_set = false;
};

// `routing_rules: [[query, queue], ...]`: the first rule whose query matches a class picks the
// queue its jobs go to (worker_selector.hpp); a null or empty queue keeps the class's own.
struct RoutingRule {
    WorkerSelector selector;
    std::string queue;
    int line = -1;
};

// `metrics: {listen: "127.0.0.1:9394"}`: the Prometheus /metrics and /healthz endpoint
// (metrics_server.hpp). Off when `listen` is empty.
struct MetricsConfig {
    std::string listen;
    std::string host;  // parsed from listen
    int port = 0;      // 0: any free port (logged)
    int line = -1;
};

// `unique_jobs:` (see unique_jobs.hpp and lock_keeper.hpp).
struct UniqueJobsConfig {
    std::chrono::milliseconds default_lock_ttl{60000};  // when neither payload nor YAML says
    std::chrono::milliseconds reaper_interval{60000};   // stale-lock reaper, one per fleet
    std::chrono::milliseconds wait_interval{1000};      // a waiting copy re-checks after this
    bool modern_digest = false;  // digest_algorithm: modern — SHA3-256 as sidekiq-unique-jobs 8's
                                 // :modern, for kiqd's own digests (default legacy: MD5)
    // digest_json: json_2_15 — the floats in kiqd's own digests as the app's json gem (2.15 or
    // later, 3.x) writes them; default float_to_s (json before 2.11).
    bool json_2_15_floats = false;
};

// `pause_control:` (see pause_controller.hpp).
struct PauseControlConfig {
    // How often each process reads which queues and workers are paused. A pause takes effect in
    // every process within this (plus one job already being fetched).
    std::chrono::milliseconds refresh_interval{500};
    // How often one process of the fleet moves parked jobs of resumed workers back to their
    // queues; while a class still has parked jobs the next round follows after at most 1 s.
    std::chrono::milliseconds resume_interval{5000};
    int batch_size = 1000;  // parked jobs moved per class per round, atomically
};

// `concurrency_limits:` (see concurrency_limit.hpp): how long a slot outlives the last sign of
// life of its holder, and how often parked jobs are moved back when slots free up by expiry.
struct ConcurrencyLimitsConfig {
    std::chrono::milliseconds slot_ttl{30000};
    std::chrono::milliseconds check_interval{5000};
};

// `plugins: [path/to/libmyjobs.so, ...]`: shared objects loaded at start (see plugin.hpp).
struct PluginSpec {
    std::string path;
    int line = -1;
};

// `fetch: reliable` and its `reliable_fetch:` options (see reliable_fetcher.hpp and
// orphan_recovery.hpp).
enum class FetchMode { basic, reliable };

struct ReliableFetchConfig {
    // How often each process tries to recover orphaned working lists (one process at a time).
    std::chrono::milliseconds orphan_check_interval{60000};
    // A process whose liveness key is older than this is dead and its working lists orphans.
    std::chrono::milliseconds liveness_ttl{60000};
    // A job interrupted this many times by dying processes goes to the dead set (poison pill).
    int max_interruptions = 3;
    // Jobs moved from the queues into the working list per round trip (one Lua script) and
    // handed to the processors from a process-wide buffer (reliable_fetcher.hpp). 1 = one job
    // per fetch. Default chosen by measurement (docs/reliable-fetch.md).
    int batch_size = kDefaultBatchSize;
    static constexpr int kDefaultBatchSize = 50;
    static constexpr int kMaxBatchSize = 1000;
};

// `fair_fetch:` (fair_fetch_config.hpp, fair_fetcher.hpp): queues served tenant by tenant.
// Each fair queue's jobs are split into one list per tenant and fetched round-robin (deficit
// round-robin with `weights`), whoever pushed them.
struct FairFetchQueue {
    std::string queue;
    std::optional<int> arg;                // the tenant is args[arg] ...
    std::string key;                       // ... or the payload's top-level `key`
    std::map<std::string, int> weights;    // tenant → jobs per turn (default 1)
    int max_tenants = kDefaultMaxTenants;  // tenants beyond it share the tenantless bucket
    int line = -1;
    static constexpr int kDefaultMaxTenants = 10000;
};

struct FairFetchConfig {
    std::vector<FairFetchQueue> queues;  // in file order
    const FairFetchQueue* find(const std::string& queue) const {
        for (const auto& q : queues)
            if (q.queue == queue) return &q;
        return nullptr;
    }
};

// One schedule declared in the YAML — `cron:`, sidekiq-scheduler's `:scheduler: :schedule:` or a
// top-level `:schedule:` (cron_config.hpp) — which kiqd writes into sidekiq-cron's keys at start so
// that its poller, the gem's Web UI tab and its API all see it (cron_poller.hpp).
enum class CronLayoutSetting { auto_detect, v1, v2 };

struct CronScheduleSpec {
    std::string name;
    std::string cron;  // 5 or 6 fields and an optional zone, as fugit reads it
    std::string job_class;
    std::string queue;             // "" = "default"
    std::string args_json = "[]";  // a JSON array
    std::string description;
    std::optional<bool> enabled;    // unset: keep the status in Redis (a Web UI disable survives)
    bool active_job = false;        // enqueue through ActiveJob's Sidekiq adapter wrapper
    bool date_as_argument = false;  // append the enqueue time (epoch seconds) to args
    // sidekiq-scheduler's one-off runs, instead of a cron line: `at:` (epoch seconds) and `in:`
    // (seconds after the process starts). Such an entry is not a sidekiq-cron job: the cron
    // poller pushes it once, to `schedule`, shortly before it is due (cron_poller.hpp).
    std::optional<double> once_at;
    std::optional<double> once_in;
    bool one_off() const { return once_at || once_in; }
    std::string ns;   // sidekiq-cron 2.x's namespace; "" = cron.namespace
    std::string key;  // "cron[0]", "scheduler.schedule.hello": for messages
    int line = -1;
};

// sidekiq-limit_fetch's queue limits (docs/configuration.md#queue-limits): the keys the gem reads
// from sidekiq.yml, kept in the gem's Redis keys (limit_fetch:limit:QUEUE, ...) that Ruby
// processes running the gem read too.
struct LimitFetchConfig {
    // Fetch as the gem does: set by any key below, or by an app whose runner reports the gem.
    bool enabled = false;
    std::map<std::string, long long> limits;          // `limits: {queue: N}`: across processes
    std::map<std::string, long long> process_limits;  // `process_limits: {queue: N}`: per process
    // `blocking: [q, [a, b]]`: a queue alone blocks every queue after it while it has jobs in
    // progress; a group blocks all but the group's queues.
    std::vector<std::vector<std::string>> blocking;
    int line = -1;  // the first of these keys, for messages
};

struct Config {
    std::string source;  // the file it came from, for messages
    int concurrency = 10;
    std::chrono::milliseconds timeout{25000};  // shutdown grace period
    std::vector<QueueWeight> queues;
    // Sidekiq 7's `capsules:` besides the default capsule, in file order (none: one capsule).
    std::vector<CapsuleConfig> capsules;
    FetchMode fetch = FetchMode::basic;
    ReliableFetchConfig reliable_fetch;
    // `prefetch: N` (basic fetch only, opt-in): pop up to N jobs per round trip into a local
    // buffer. Buffered jobs exist only in this process: lost on kill -9, requeued on a clean
    // stop. 1 = off (Sidekiq's one BRPOP per job).
    int prefetch = 1;
    std::string tag;
    std::vector<std::string> labels;
    std::string environment;
    bool verbose = false;
    // The Sidekiq major kiqd presents itself as (`compat: 6|7|8`). With `compat: auto` (the
    // default, compat_auto) it follows the cluster at run time (server/cluster_compat.hpp) and
    // `compat` stays 6: the payload format every major reads.
    Compat compat = Compat::v6;
    bool compat_auto = true;
    RedisConfig redis;
    LoggingConfig logging;
    int max_retries = 25;
    bool max_retries_set = false;  // the config says max_retries (it then wins over the app's)
    long long dead_max_jobs = 10000;
    long long dead_timeout_seconds = 180LL * 24 * 3600;
    bool dead_max_jobs_set = false, dead_timeout_set = false;  // as max_retries_set
    double average_scheduled_poll_interval = 5.0;
    std::optional<double> poll_interval_average;  // set = fixed average, no scaling by processes
    size_t max_payload_bytes = 16 * 1024 * 1024;
    std::vector<MiddlewareSpec> server_middleware;
    std::vector<ExecHandlerSpec> exec_handlers;      // in file order
    std::vector<RunnerSpec> runners;                 // `runners:`, in file order
    std::vector<RunnerHandlerSpec> runner_handlers;  // `handlers: … runner:`, in file order
    std::map<std::string, ClassSpec> classes;        // `handlers:` entries, by job class
    UniqueJobsConfig unique_jobs;
    PauseControlConfig pause_control;
    ConcurrencyLimitsConfig concurrency_limits;
    FairTenantConfig fair_tenant;
    FairFetchConfig fair_fetch;
    LimitFetchConfig limit_fetch;
    std::vector<PluginSpec> plugins;  // in file order
    std::vector<RoutingRule> routing_rules;
    std::string selector;  // `selector:` / `--selector`: serve only the matching classes' queues
    int selector_line = -1;
    MetricsConfig metrics;
    // At most this many cpu-bound jobs run at once in this process (cpu_gate.hpp); 0 = the
    // number of cores, resolved by validate_config.
    int cpu_bound_concurrency = 0;
    bool job_metadata = true;  // `job_metadata:` the metadata middleware (timings, SLOs, labels)
    // Keys of other tools' sidekiq.yml sections that load but do nothing in kiqd, one line
    // each ("key (line N): what kiqd does not do"), logged at start and shown by check-config.
    std::vector<std::string> load_warnings;
    // Schedules from `cron:`, `:scheduler: :schedule:` and `:schedule:` (cron_config.hpp), and
    // how often the cron poller looks at sidekiq-cron's jobs (`cron_poll_interval`, seconds,
    // the gem's key and default; 0 = never, as in the gem).
    std::vector<CronScheduleSpec> cron;
    double cron_poll_interval = 30;
    bool cron_poll_interval_set = false;
    // Which of sidekiq-cron's key layouts kiqd reads and writes (`cron: layout:`): 1.x's
    // `cron_jobs`, 2.x's namespaced `cron_jobs:<ns>`, or (auto) the one Redis holds.
    CronLayoutSetting cron_layout = CronLayoutSetting::auto_detect;
    std::string cron_namespace = "default";    // `cron: namespace:`, 2.x's default_namespace
    std::vector<std::string> cron_namespaces;  // `cron: namespaces:`; empty = found by SCAN
    // sidekiq-cron's settings of the same names (`cron: reschedule_grace_period:`,
    // `cron: history_size:`): how many seconds after its time a run may still be enqueued, and
    // how many jid history entries each job keeps. Set them as the app's initializer does.
    long long cron_reschedule_grace_period = 60;
    int cron_history_size = 10;
    std::string cron_schedule_file;  // `cron_schedule_file:` as it was given
};

// Processor threads of the whole process: `concurrency` plus every capsule's (Sidekiq's
// Config#total_concurrency).
int total_concurrency(const Config& config);

// Parses YAML text (after expanding the supported ERB forms). `environment` selects a
// sub-hash such as production:. Throws ConfigError.
Config parse_config(const std::string& yaml_text, const std::string& source,
                    const std::string& environment);
Config load_config_file(const std::string& path, const std::string& environment);

// Checks ranges and combinations after command-line overrides; throws ConfigError.
void validate_config(Config& config);

// "host:port" of `metrics.listen` (port 0 = any free port). Throws ConfigError naming `key`.
void parse_listen_address(const std::string& key, const std::string& text, MetricsConfig& out,
                          int line = -1);

// "basic" or "reliable" (the `fetch:` key and `--fetch`). Throws ConfigError naming `key`.
FetchMode parse_fetch_mode(const std::string& key, const std::string& value, int line = -1);

// "name" or "name,weight", as `-q` takes it. Throws ConfigError.
QueueWeight parse_queue_arg(const std::string& arg);

// The canonical name of a sidekiq-unique-jobs lock type or alias ("while_busy" →
// "while_executing"); "" when it is not one.
std::string canonical_lock_type(const std::string& name);

// Expands <%= ENV['X'] %>, <%= ENV.fetch('X', 'd') %> and <%= ENV['X'] || 'd' %>; any other
// ERB tag is a ConfigError naming its line.
std::string expand_erb(const std::string& text);

}  // namespace kiqd
