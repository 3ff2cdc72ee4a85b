// The kiqd command line: the daemon (default), `check-config`, the admin commands
// (`stats`, `queues`, `processes`, `retries`, `dead`, `busy`, `scheduled`, `queue`, `job`, `top`,
// `quiet`, `stop`, ...; see admin.hpp), `enqueue` (push one job through the process client) and
// `help [COMMAND]`. The operator commands find their config as config_source.hpp says. Parses flags
// with CLI11, loads and validates the configuration (exit 78 naming the key on any problem, before
// Redis is touched), builds the logger, registry and middleware chain, and hands over to the
// Launcher.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <iostream>

#include "admin/admin.hpp"
#include "admin/admin_connection.hpp"
#include "admin/config_source.hpp"
#include "common/control_escape.hpp"
#include "config/worker_catalog.hpp"
#include "config/yaml_helpers.hpp"
#include "handlers/exec_handler.hpp"
#include "handlers/group_keeper.hpp"
#include "handlers/plugin_loader.hpp"
#include "handlers/runner_handler.hpp"
#include "kiqd/kiqd.hpp"
#include "server/app_settings.hpp"
#include "server/connection_budget.hpp"
#include "server/eviction_policy.hpp"
#include "server/launcher.hpp"
#include "server/logging.hpp"

namespace kiqd {
namespace {

struct CliOptions {
    std::string config_path;
    std::string environment;
    std::optional<int> concurrency;
    std::vector<std::string> queues;
    std::optional<double> timeout;
    std::optional<std::string> tag;
    std::optional<std::string> fetch;
    std::optional<std::string> selector;
    bool verbose = false;
    std::optional<std::string> redis_url;  // --redis-url (operator commands)
    admin::ConfigChoice config_choice;     // operator commands: how config_path was chosen
};

void add_common(CLI::App& app, CliOptions& o) {
    app.add_option("-C,--config", o.config_path, "YAML config file (sidekiq.yml works too)");
    app.add_option("-e,--environment", o.environment,
                   "environment sub-hash to apply (default: $RAILS_ENV, $APP_ENV, $RACK_ENV)");
    app.add_option("-c,--concurrency", o.concurrency, "processor threads");
    app.add_option("-q,--queue", o.queues, "queue to process, NAME or NAME,WEIGHT (repeatable)");
    app.add_option("-t,--timeout", o.timeout, "shutdown timeout in seconds");
    app.add_option("-g,--tag", o.tag, "process tag shown in the Web UI");
    app.add_option("--fetch", o.fetch, "basic (Sidekiq's BasicFetch) or reliable (no job lost)");
    app.add_option("--selector", o.selector,
                   "serve only the queues of workers matching this query, e.g. "
                   "'urgency=high&resource_boundary!=memory'");
    app.add_flag("-v,--verbose", o.verbose, "debug logging");
}

// need_queues = false for the admin commands: they read the same file and REDIS_URL as the
// daemon but process no queue, so a config without `queues` is fine for them. `redis_source`
// (operator commands): set to where the Redis URL came from (admin/config_source.hpp).
Config build_config(const CliOptions& o, bool need_queues = true,
                    std::string* redis_source = nullptr) {
    std::string env = o.environment;
    for (const char* var : {"RAILS_ENV", "APP_ENV", "RACK_ENV"}) {
        if (!env.empty()) break;
        if (const char* v = std::getenv(var)) env = v;
    }
    if (env.empty()) env = "development";
    Config c = o.config_path.empty() ? Config{} : load_config_file(o.config_path, env);
    c.environment = env;
    if (o.concurrency) {
        if (*o.concurrency < 1) throw ConfigError("-c", "must be at least 1");
        c.concurrency = *o.concurrency;
    }
    if (!o.queues.empty()) {
        c.queues.clear();
        for (const auto& q : o.queues) c.queues.push_back(parse_queue_arg(q));
    }
    if (o.selector) {
        c.selector = *o.selector;
        c.selector_line = -1;
    }
    // With a selector the queues come from the matching workers (apply_selector, once the
    // handlers are registered); `queues:` then only lends its weights.
    if ((o.config_path.empty() || !need_queues || !c.selector.empty()) && c.queues.empty())
        c.queues.push_back({"default", 0});
    if (o.timeout) {
        if (!(*o.timeout > 0)) throw ConfigError("-t", "must be greater than 0");
        if (*o.timeout > static_cast<double>(config_detail::kMaxDurationSeconds))
            throw ConfigError("-t", config_detail::max_duration_text());
        c.timeout = std::chrono::milliseconds(static_cast<long long>(*o.timeout * 1000));
    }
    if (o.tag) c.tag = *o.tag;
    if (o.fetch) c.fetch = parse_fetch_mode("--fetch", *o.fetch);
    if (o.verbose) c.verbose = true;
    if (redis_source)
        *redis_source = admin::redis_source(o.redis_url, o.config_choice,
                                            !c.redis.url.empty() || c.redis.sentinel.enabled(),
                                            std::getenv("REDIS_URL"));
    if (o.redis_url) c.redis.url = *o.redis_url;
    validate_config(c);
    return c;
}

// The operator commands' config (admin and enqueue): -C, else $KIQD_CONFIG, else
// /etc/kiqd/kiqd.yml when readable (admin/config_source.hpp); no queues needed.
Config build_operator_config(CliOptions& o, std::string* redis_source = nullptr) {
    o.config_choice = admin::choose_admin_config(o.config_path, std::getenv("KIQD_CONFIG"));
    o.config_path = o.config_choice.path;
    return build_config(o, false, redis_source);
}

std::vector<std::string> queue_names(const Config& c) {
    std::vector<std::string> out;
    for (const auto& q : c.queues) out.push_back(q.name);
    return out;
}

// "critical:3,default:1 (weighted)" or "a,b (strict)", as the capsule's fetch reads them.
std::string describe_fetch_queues(const std::vector<QueueWeight>& queues) {
    std::string out;
    bool weighted = false;
    for (const auto& q : queues) {
        out += (out.empty() ? "" : ",") + q.name;
        if (q.weight > 0) out += ":" + std::to_string(q.weight);
        weighted = weighted || q.weight > 0;
    }
    return out + (weighted ? " (weighted)" : " (strict)");
}

int config_error(const ConfigError& e, const std::string& source) {
    // The message quotes the file (keys, values, ERB output): escaped like every log line.
    std::cerr << "kiqd: configuration error in "
              << escape_control(source.empty() ? "command line" : source) << ": "
              << escape_control(e.what()) << std::endl;
    return kExitConfig;
}

// The admin subcommands, each with the daemon's -C/-e (so config and REDIS_URL resolve the same).
struct AdminCli {
    admin::Request request;
    CliOptions opts;
    std::vector<std::pair<CLI::App*, std::string>> subs;

    void add(CLI::App& app) {
        auto sub = [&](const std::string& name, const std::string& help) {
            auto* s = app.add_subcommand(name, help);
            // Only what locates Redis: the daemon's tuning flags mean nothing here.
            s->add_option("-C,--config", opts.config_path,
                          "YAML config file (the daemon's; only redis: is used)");
            s->add_option("-e,--environment", opts.environment,
                          "environment sub-hash (default: $RAILS_ENV, $APP_ENV, $RACK_ENV)");
            s->add_option(
                "--redis-url", opts.redis_url,
                "Redis URL; wins over -C, $KIQD_CONFIG, /etc/kiqd/kiqd.yml and REDIS_URL");
            s->add_flag("--json", request.json, "JSON output for scripts");
            s->add_flag("--no-headers", request.no_headers,
                        "text without the header row and the \"Redis ...\" line");
            subs.emplace_back(s, name);
            return s;
        };
        sub("stats", "cluster counters (as Sidekiq::Stats)");
        sub("queues", "size and latency of each queue");
        sub("processes", "live processes: identity, busy/concurrency, RSS, last beat, quiet");
        for (const std::string set : {"retries", "dead"}) {
            const std::string actions =
                set == "retries" ? "retry, delete or kill" : "retry or delete";
            auto* s = sub(set, "list, " + actions + " " + set + " entries");
            s->add_option("action", request.action,
                          "list (default), " + actions +
                              (set == "retries" ? " (kill: to the dead set)" : ""));
            s->add_option("jid", request.targets, "JIDs to act on");
            s->add_option("--class", request.job_class, "only entries of this job class");
            s->add_flag("--all", request.all, "act on every entry");
            s->add_option("--limit", request.limit, "list at most this many entries");
        }
        for (const std::string verb : {"pause", "resume"}) {
            auto* s = sub(verb, verb +
                                    " a worker class (its jobs are parked) or a queue (not "
                                    "fetched from) in every kiqd process");
            s->add_option("kind", request.action, "worker or queue")
                ->required()
                ->check(CLI::IsMember({"worker", "queue"}));
            s->add_option("name", request.targets, "the job class or queue name")
                ->required()
                ->expected(1);
        }
        sub("paused", "what is paused, with the jobs queued or parked behind each pause");
        {
            auto* s = sub("fair-fetch",
                          "a fair queue's waiting tenants (status), or every job back into the "
                          "plain queue in order (drain: turning fair fetch off)");
            s->add_option("action", request.action, "status or drain")
                ->required()
                ->check(CLI::IsMember({"status", "drain"}));
            s->add_option("queue", request.targets, "the queue")->required()->expected(1);
            s->add_option("--limit", request.limit, "status: at most this many tenants (20)");
        }
        {
            auto* s = sub("unique", "unique-job locks: list them (locks), free one (unlock)");
            s->add_option("action", request.action, "locks (default) or unlock")
                ->check(CLI::IsMember({"locks", "unlock"}));
            s->add_option("digest", request.targets, "unlock: the lock's digest")->expected(0, 1);
            s->add_flag("--stale", request.stale, "locks: only those whose holder is gone");
        }
        sub("cron", "cron jobs (sidekiq-cron's and the YAML's): status, last and next run");
        sub("busy", "the jobs running now, across every process of the cluster");
        sub("scheduled", "jobs scheduled for later (perform_in/perform_at)")
            ->add_option("--limit", request.limit, "list at most this many entries");
        auto* queue = sub("queue", "list the jobs in a queue, or clear it");
        queue->add_option("action", request.action, "ls or clear")
            ->required()
            ->check(CLI::IsMember({"ls", "clear"}));
        queue->add_option("name", request.targets, "the queue name")->required()->expected(1);
        queue->add_option("--limit", request.limit, "ls: at most this many jobs (default 100)");
        queue->add_flag("--yes", request.yes, "clear without asking (needed when not on a TTY)");
        sub("job", "find a job by JID in the queues, scheduled, retries, dead and busy jobs")
            ->add_option("jid", request.targets, "the job's jid")
            ->required()
            ->expected(1);
        sub("top", "live dashboard: processes, busy jobs, queues, rates, retries, dead (q quits)")
            ->add_option("--interval", request.interval, "seconds between refreshes (default 2)")
            ->check(CLI::Range(0.1, 3600.0));
        for (const std::string sig : {"quiet", "stop"}) {
            auto* s = sub(sig, sig + " processes through their -signals list (as Sidekiq's API)");
            s->add_option("identity", request.targets, "process identities (see kiqd processes)");
            s->add_flag("--all", request.all, "every live process");
        }
    }
    const std::string* parsed() const {
        for (const auto& [s, name] : subs)
            if (s->parsed()) return &name;
        return nullptr;
    }
};

// `kiqd enqueue CLASS [ARG_JSON...] [--queue Q] [--at TIME] [--tenant T]`, with the daemon's
// -C/-e so that REDIS_URL, redis:, the key prefix and the per-class `handlers:` settings (queue,
// fair-tenant rules) resolve as in the daemon.
struct EnqueueCli {
    admin::EnqueueRequest request;
    CliOptions opts;
    CLI::App* sub = nullptr;

    void add(CLI::App& app) {
        sub =
            app.add_subcommand("enqueue", "push a job (as Sidekiq's client does); prints its jid");
        sub->add_option("-C,--config", opts.config_path,
                        "YAML config file (the daemon's: redis:, handlers: queue and fair-tenant "
                        "rules apply)");
        sub->add_option("-e,--environment", opts.environment,
                        "environment sub-hash (default: $RAILS_ENV, $APP_ENV, $RACK_ENV)");
        sub->add_option("class", request.job_class, "job class, e.g. HardWorker")->required();
        sub->add_option("args", request.args_json,
                        "job arguments, each one JSON value: 42 '\"text\"' '{\"a\":1}' "
                        "(put -- before a negative number)");
        sub->add_option("--queue", request.queue, "queue (default: the class's, else default)");
        sub->add_option("--at", request.at, "run at TIME: epoch seconds, +N[s|m|h|d], or ISO 8601");
        sub->add_option("--tenant", request.tenant, "the job's fair_tenant");
        sub->add_option("--redis-url", opts.redis_url,
                        "Redis URL; wins over -C, $KIQD_CONFIG, /etc/kiqd/kiqd.yml and REDIS_URL");
    }
};

}  // namespace

int run(int argc, char** argv, HandlerRegistry& handlers, MiddlewareRegistry& middleware) {
    // kiqd started again as its own group keeper (handlers/group_keeper.hpp), before anything
    // else: it must hold nothing of kiqd's.
    if (argc == 2 && std::string_view(argv[1]) == kGroupKeeperArg) run_group_keeper();
    // First of all: systemd's notify variables leave the environment before exec handlers (or
    // anything else) copy it, so that no child can talk to systemd in kiqd's name.
    SystemdNotifier notifier = SystemdNotifier::from_environment();
    // Named "kiqd" so that usage lines do not show the path the binary was started from.
    CLI::App app{"kiqd: a Sidekiq-compatible job processor", "kiqd"};
    app.set_version_flag("--version", std::string("kiqd ") + KIQD_VERSION);
    CliOptions opts;
    add_common(app, opts);
    auto* check = app.add_subcommand("check-config", "validate the configuration and exit");
    CliOptions check_opts;
    add_common(*check, check_opts);
    AdminCli admin_cli;
    admin_cli.add(app);
    EnqueueCli enqueue_cli;
    enqueue_cli.add(app);
    std::string help_topic;
    auto* help = app.add_subcommand("help", "this help, or one command's: kiqd help COMMAND");
    help->add_option("command", help_topic, "the command to explain");
    // `kiqd help [COMMAND]` is answered before parsing: parsing `help job` would take `job` as
    // that subcommand and fail on its missing JID.
    if (argc >= 2 && std::string_view(argv[1]) == "help") {
        if (argc > 3) {
            std::cerr << "kiqd: help: one command at most" << std::endl;
            return kExitUsage;
        }
        CLI::App* topic = argc == 2 ? &app : nullptr;
        for (auto* s : app.get_subcommands([](const CLI::App*) { return true; }))
            if (argc == 3 && s->get_name() == argv[2]) topic = s;
        if (!topic) {
            std::cerr << "kiqd: help: no command " << escape_control(argv[2])
                      << " (kiqd help lists them)" << std::endl;
            return kExitUsage;
        }
        std::cout << (topic == &app ? app.help() : topic->help(app.get_name()));
        return 0;
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        app.exit(e);
        return kExitUsage;
    }

    // A write to a socket the peer closed (Redis restarted, a child exited before reading its
    // stdin) must fail with EPIPE, not kill the daemon.
    std::signal(SIGPIPE, SIG_IGN);
    if (const std::string* command = admin_cli.parsed()) {
        admin_cli.request.command = *command;
        Config admin_config;
        try {
            admin_config = build_operator_config(admin_cli.opts, &admin_cli.request.redis_source);
        } catch (const ConfigError& e) {
            return config_error(e, admin_cli.opts.config_path);
        }
        return admin::run_admin(admin_cli.request, admin_config, std::cout, std::cerr);
    }
    if (enqueue_cli.sub->parsed()) {
        Config enqueue_config;
        try {
            enqueue_config = build_operator_config(enqueue_cli.opts);
        } catch (const ConfigError& e) {
            return config_error(e, enqueue_cli.opts.config_path);
        }
        return admin::run_enqueue(enqueue_cli.request, enqueue_config, std::cout, std::cerr);
    }
    register_builtin_handlers(handlers);
    const CliOptions& o = check->parsed() ? check_opts : opts;
    Config config;
    MiddlewareChain chain;
    std::vector<LoadedPlugin> plugins;
    PauseStrategies pause_strategies;
    std::unique_ptr<RunnerPools> runner_pools;
    try {
        config = build_config(o);
        // Plugins first: they may add middleware that server_middleware: names. Exec handlers
        // from the YAML come last and win over a C++ or plugin handler of the same class.
        plugins = load_plugins(config, handlers, middleware);
        chain = middleware.build(config.server_middleware);
        pause_strategies = PauseStrategies(config, middleware.pause_strategies);
        register_exec_handlers(config, handlers);
        runner_pools = std::make_unique<RunnerPools>(config);
        register_runner_handlers(config, handlers, *runner_pools);
    } catch (const ConfigError& e) {
        return config_error(e, o.config_path);
    }
    // C++ metadata declarations are checked here (exit 78); a selector picks the queues. The
    // daemon does this once its runner has told what the app declares (below).
    const auto build_catalog = [&]() -> std::optional<int> {
        try {
            const WorkerCatalog catalog(config, handlers);
            register_runner_selector_handlers(config, catalog, handlers, *runner_pools);
            apply_selector(config, catalog, o.selector ? "--selector" : "selector");
        } catch (const ConfigError& e) {
            return config_error(e, o.config_path);
        }
        return std::nullopt;
    };
    if (check->parsed())
        if (auto code = build_catalog()) return *code;
    // An exec command that cannot be started is not fatal (it may be installed later, and the
    // job is retried), but it is worth a warning.
    std::vector<std::string> warnings = config.load_warnings;
    for (const auto& spec : config.exec_handlers) {
        if (auto problem = exec_command_problem(spec))
            warnings.push_back("handlers." + spec.job_class + " (line " +
                               std::to_string(spec.line) + "): cannot be started: " + *problem);
    }
    if (check->parsed()) {
        for (const auto& w : warnings)
            std::cerr << "kiqd: warning: " << escape_control(w) << std::endl;
        // A runner is booted once to prove its command works (docs/runner-protocol.md).
        const auto runner_problems = runner_pools->boot_check();
        for (const auto& p : runner_problems)
            std::cerr << "kiqd: configuration error in "
                      << escape_control(o.config_path.empty() ? "command line" : o.config_path)
                      << ": " << escape_control(p) << std::endl;
        if (!runner_problems.empty()) return kExitConfig;
        std::cout << "kiqd: "
                  << escape_control(o.config_path.empty() ? "command line" : o.config_path)
                  << " is valid: concurrency=" << config.concurrency << ", " << config.queues.size()
                  << " queue(s) ("
                  << escape_control(fmt::format("{}", fmt::join(queue_names(config), ","))) << "), "
                  << config.exec_handlers.size() << " exec handler(s), " << config.runners.size()
                  << " runner(s), " << config.plugins.size() << " plugin(s), redis "
                  << escape_control(redis::parse_redis_url(config.redis.url).describe())
                  << (config.redis.endpoint.tls ? " over TLS" : "") << std::endl;
        // Sidekiq 7's capsules, each with its own threads and queues (docs/configuration.md).
        if (!config.capsules.empty()) {
            std::cout << "kiqd: capsule default: concurrency=" << config.concurrency << ", queues "
                      << escape_control(describe_fetch_queues(config.queues)) << std::endl;
            for (const auto& cap : config.capsules)
                std::cout << "kiqd: capsule " << escape_control(cap.name)
                          << ": concurrency=" << cap.concurrency << ", queues "
                          << escape_control(describe_fetch_queues(cap.queues)) << std::endl;
        }
        const auto connections = redis_connection_count(config);
        std::cout << "kiqd: " << connections.total << " Redis connections per process ("
                  << connections.parts << ")" << std::endl;
        // An evicting Redis loses jobs in silence (eviction_policy.hpp): checked when Redis
        // answers; the configuration stays valid either way.
        const auto options = admin::admin_connection_options(config, "check-config");
        try {
            redis::Connection conn(options);
            if (auto warning = eviction_warning(read_maxmemory_policy(conn)))
                std::cerr << "kiqd: warning: " << escape_control(*warning) << std::endl;
            else
                std::cout << "kiqd: Redis maxmemory-policy is noeviction" << std::endl;
        } catch (const redis::Error& e) {
            std::cout << "kiqd: Redis maxmemory-policy not checked: "
                      << escape_control(admin::describe_redis_error(e, options)) << std::endl;
        }
        return 0;
    }
    std::shared_ptr<spdlog::logger> logger;
    try {
        logger = make_logger(config.logging, config.verbose);
    } catch (const spdlog::spdlog_ex& e) {
        return config_error(ConfigError("logging.file", e.what()), o.config_path);
    }
    for (const auto& p : plugins)
        logger->info("loaded plugin {} ({} new handler(s))", p.path, p.handlers_added);
    for (const auto& w : warnings) logger->warn("{}", w);
    int code = 0;
    runner_pools->start(*logger);
    // As Sidekiq boots the app before it fetches: the app's capsules, its job classes' queues
    // and worker attributes, and its retry and dead-set settings shape the daemon
    // (server/app_settings.hpp). A runner that is not ready in time is waited for no longer.
    if (!runner_pools->empty()) {
        logger->info("waiting for the runner to boot the app (its Sidekiq declarations count)");
        if (auto app = runner_pools->await_app_settings()) {
            try {
                adopt_app_declarations(config, *app, *logger);
            } catch (const ConfigError& e) {
                runner_pools->stop();
                return config_error(e, o.config_path);
            }
            runner_pools->mark_app_settings_taken();
        } else {
            logger->warn(
                "no runner was ready within its boot_timeout: kiqd starts without the app's "
                "capsules and job classes (its retry settings follow once a runner is ready)");
        }
    }
    if (auto failed = build_catalog()) {
        runner_pools->stop();
        return *failed;
    }
    {
        Launcher launcher(config, handlers, chain, *logger, std::move(notifier),
                          std::move(pause_strategies));
        code = launcher.run();
    }
    runner_pools->stop();
    logger->flush();
    spdlog::shutdown();
    return code;
}

int run(int argc, char** argv) {
    HandlerRegistry handlers;
    MiddlewareRegistry middleware;
    return run(argc, argv, handlers, middleware);
}

}  // namespace kiqd
