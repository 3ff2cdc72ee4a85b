#include "server/app_settings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "config/capsules_config.hpp"
#include "config/limit_fetch_config.hpp"
#include "config/yaml_helpers.hpp"

namespace kiqd {
namespace {

// One setting: the app's value is taken unless kiqd's config sets the key; where both do and
// differ, kiqd's wins and says so. Returns the value to use.
long long settle(const char* key, const std::optional<long long>& app, bool config_set,
                 long long config_value, spdlog::logger& log) {
    if (!app || *app == config_value) return config_value;
    if (config_set) {
        log.warn(
            "{}: kiqd's config says {} and the app's Sidekiq configuration says {}; "
            "kiqd's config wins",
            key, config_value, *app);
        return config_value;
    }
    log.info("{}: {}, from the app's Sidekiq configuration", key, *app);
    return *app;
}

std::string describe_queues(const std::vector<QueueWeight>& queues) {
    std::string out;
    for (const auto& q : queues) {
        if (!out.empty()) out += ',';
        out += q.name;
        if (q.weight > 0) out += ':' + std::to_string(q.weight);
    }
    return out;
}

bool same_queues(const std::vector<QueueWeight>& a, const std::vector<QueueWeight>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto& x, const auto& y) {
        return x.name == y.name && x.weight == y.weight;
    });
}

std::string describe_metadata(const WorkerMetadata& md) {
    std::string out = fmt::format("urgency={} resource_boundary={}", to_string(md.urgency),
                                  to_string(md.resource_boundary));
    if (!md.feature_category.empty()) out += " feature_category=" + md.feature_category;
    if (md.idempotent) out += " idempotent";
    if (md.external_dependencies) out += " external_dependencies";
    if (!md.tags.empty()) out += fmt::format(" tags={}", fmt::join(md.tags, ","));
    return out;
}

bool same_metadata(const WorkerMetadata& a, const WorkerMetadata& b) {
    return a.urgency == b.urgency && a.resource_boundary == b.resource_boundary &&
           a.feature_category == b.feature_category && a.idempotent == b.idempotent &&
           a.external_dependencies == b.external_dependencies && a.tags == b.tags;
}

// An app capsule as kiqd's CapsuleConfig, or the reason it cannot be one.
std::optional<CapsuleConfig> to_capsule(const runner::AppCapsule& app, std::string& why) {
    CapsuleConfig cap;
    cap.name = app.name;
    if (app.concurrency < 1 || app.concurrency > 1000) {
        why = fmt::format("its concurrency {} is not between 1 and 1000", app.concurrency);
        return std::nullopt;
    }
    cap.concurrency = static_cast<int>(app.concurrency);
    for (const auto& [name, weight] : app.queues) {
        if (weight < 0 || weight > 1000) {
            why = fmt::format("queue '{}' has the weight {} (kiqd takes 1 to 1000)", name, weight);
            return std::nullopt;
        }
        cap.queues.push_back({name, static_cast<int>(weight)});
    }
    if (cap.queues.empty()) {
        why = "it has no queues";
        return std::nullopt;
    }
    try {
        config_detail::check_queue_name("capsules", cap.name);
    } catch (const ConfigError& e) {
        why = std::string("its name: ") + e.what();
        return std::nullopt;
    }
    return cap;
}

// The app's capsules join kiqd's, each with its own threads and queues as under Sidekiq. A
// capsule kiqd's config also defines keeps kiqd's. A queue of kiqd's top-level list that an app
// capsule names is served by that capsule alone: that is what the capsule is declared for (a
// concurrency-1 capsule runs its jobs one at a time), where Sidekiq would also fetch it into the
// default capsule.
void adopt_capsules(Config& config, const std::vector<runner::AppCapsule>& capsules,
                    spdlog::logger& log) {
    const auto saved_queues = config.queues;
    const auto saved_capsules = config.capsules;
    std::vector<std::string> added, moved;
    for (const auto& app : capsules) {
        std::string why;
        auto cap = to_capsule(app, why);
        if (!cap) {
            log.warn("the app's capsule '{}' is not applied: {}", app.name, why);
            continue;
        }
        auto own = std::find_if(config.capsules.begin(), config.capsules.end(),
                                [&](const auto& c) { return c.name == cap->name; });
        if (own != config.capsules.end()) {
            if (own->concurrency != cap->concurrency || !same_queues(own->queues, cap->queues))
                log.warn(
                    "capsules.{}: kiqd's config says concurrency={} queues {} and the app's "
                    "Sidekiq configuration says concurrency={} queues {}; kiqd's config wins",
                    cap->name, own->concurrency, describe_queues(own->queues), cap->concurrency,
                    describe_queues(cap->queues));
            continue;
        }
        for (const auto& q : cap->queues) {
            auto top = std::find_if(config.queues.begin(), config.queues.end(),
                                    [&](const auto& t) { return t.name == q.name; });
            if (top == config.queues.end()) continue;
            config.queues.erase(top);
            moved.push_back(q.name + " (capsule " + cap->name + ")");
        }
        added.push_back(fmt::format("{} (concurrency={}, queues {})", cap->name, cap->concurrency,
                                    describe_queues(cap->queues)));
        config.capsules.push_back(std::move(*cap));
    }
    if (added.empty()) return;
    std::string problem;
    if (config.queues.empty()) {
        problem = "they would leave kiqd's own queues empty";
    } else {
        try {
            config_detail::check_capsules(config);
        } catch (const ConfigError& e) {
            problem = e.what();
        }
    }
    if (!problem.empty()) {
        config.queues = saved_queues;
        config.capsules = saved_capsules;
        log.warn("the app's capsules {} are not applied: {}", fmt::join(added, ", "), problem);
        return;
    }
    log.info("capsules from the app's Sidekiq configuration: {}", fmt::join(added, ", "));
    if (!moved.empty())
        log.warn(
            "queues {} are listed in kiqd's queues and in a capsule of the app: kiqd serves them "
            "from the app's capsule only",
            fmt::join(moved, ", "));
}

// The app's worker attributes, or nullopt with `why` when a value is not one kiqd knows or the
// combination breaks GitLab's rules.
std::optional<WorkerMetadata> to_metadata(const runner::AppWorkerClass& cls, std::string& why) {
    WorkerMetadata md;
    md.declared = true;
    if (auto it = cls.attributes.find("urgency"); it != cls.attributes.end()) {
        auto u = parse_urgency(it->second);
        if (!u) {
            why = "unknown urgency '" + it->second + "'";
            return std::nullopt;
        }
        md.urgency = *u;
    }
    if (auto it = cls.attributes.find("resource_boundary"); it != cls.attributes.end()) {
        auto b = parse_resource_boundary(it->second);
        if (!b) {
            why = "unknown resource boundary '" + it->second + "'";
            return std::nullopt;
        }
        md.resource_boundary = *b;
    }
    if (auto it = cls.attributes.find("feature_category"); it != cls.attributes.end())
        md.feature_category = it->second;
    md.idempotent = cls.idempotent.value_or(false);
    md.external_dependencies = cls.external_dependencies.value_or(false);
    md.tags = cls.tags.value_or(std::vector<std::string>{});
    try {
        validate_metadata("the app's class " + cls.name, md);
    } catch (const ConfigError& e) {
        why = e.what();
        return std::nullopt;
    }
    return md;
}

// The app's job classes: their queue and worker attributes fill kiqd's class entries, so the
// catalog (SLO metrics, routing rules, selectors, the cpu-bound cap) knows them as if declared.
void adopt_classes(Config& config, const std::vector<runner::AppWorkerClass>& classes,
                   spdlog::logger& log) {
    size_t with_metadata = 0, with_queue = 0;
    for (const auto& cls : classes) {
        std::optional<WorkerMetadata> md;
        if (cls.has_metadata()) {
            std::string why;
            md = to_metadata(cls, why);
            if (!md)
                log.warn("the worker attributes of the app's class {} are not applied: {}",
                         cls.name, why);
        }
        const bool has_queue = !cls.queue.empty();
        if (!md && !has_queue) continue;
        auto [it, added] = config.classes.try_emplace(cls.name);
        ClassSpec& spec = it->second;
        if (added) spec.job_class = cls.name;
        if (md) {
            if (!spec.metadata.declared) {
                spec.metadata = *md;
                ++with_metadata;
            } else if (!same_metadata(spec.metadata, *md)) {
                log.warn(
                    "handlers.{}: kiqd's config says {} and the app's class says {}; kiqd's "
                    "config wins",
                    cls.name, describe_metadata(spec.metadata), describe_metadata(*md));
            }
        }
        if (has_queue) {
            if (spec.queue.empty()) {
                spec.queue = cls.queue;
                ++with_queue;
            } else if (spec.queue != cls.queue) {
                log.warn(
                    "handlers.{}.queue: kiqd's config says {} and the app's class says {}; "
                    "kiqd's config wins",
                    cls.name, spec.queue, cls.queue);
            }
        }
    }
    if (with_metadata || with_queue)
        log.info(
            "job classes from the app: {} with worker attributes, {} with a queue of their own",
            with_metadata, with_queue);
}

// Gems that change Sidekiq's fetch: kiqd fetches in C++, so their code never runs unless the
// runner does what they do. Each is named once, so that a limit the app declares is never
// exceeded in silence.
// An app that sets up gitlab-sidekiq-fetcher asks for reliable fetch: kiqd fetches reliably
// (its own working lists), and the Launcher recovers the gem's lists of processes that are gone
// (gitlab_list_recovery.hpp). A config kiqd cannot fetch reliably with is a start-up error.
void adopt_gitlab_fetcher(Config& config, spdlog::logger& log) {
    if (config.fetch == FetchMode::reliable) {
        log.info(
            "gitlab-sidekiq-fetcher: the app sets up reliable fetch, and kiqd fetches "
            "reliably; the gem's working lists of processes that are gone are recovered");
        return;
    }
    std::string other;
    if (config.prefetch > 1) other = "prefetch: " + std::to_string(config.prefetch);
    if (!config.capsules.empty()) other = "capsules";
    if (config.limit_fetch.enabled) other = "sidekiq-limit_fetch's limits";
    if (!other.empty())
        throw ConfigError("fetch",
                          "the app sets up gitlab-sidekiq-fetcher's reliable fetch, and kiqd's "
                          "config has " +
                              other +
                              ", which kiqd cannot fetch reliably with: remove it, or stop "
                              "setting up the gem");
    config.fetch = FetchMode::reliable;
    log.warn(
        "gitlab-sidekiq-fetcher: the app sets up reliable fetch, so kiqd fetches reliably "
        "(fetch: reliable); the gem's working lists of processes that are gone are "
        "recovered");
}

// sidekiq-limit_fetch is done by kiqd's own fetch (LimitFetcher), in the gem's keys.
void report_fetch_patches(Config& config, const std::vector<runner::AppFetchPatch>& patches,
                          spdlog::logger& log) {
    std::set<std::string> said;
    for (const auto& p : patches) {
        const std::string gem = p.gem.empty() ? p.module : p.gem;
        if (!said.insert(gem).second) continue;
        if (gem == "gitlab-sidekiq-fetcher") {
            adopt_gitlab_fetcher(config, log);
            continue;
        }
        if (gem == "sidekiq-limit_fetch") {
            std::string problem;
            try {
                config_detail::check_limit_fetch(config, "the app's sidekiq-limit_fetch");
            } catch (const ConfigError& e) {
                problem = e.what();
            }
            if (problem.empty()) {
                config.limit_fetch.enabled = true;
                log.info("{}: kiqd fetches with its queue limits, in the gem's keys", gem);
            } else {
                log.warn("{}: the app uses it, and kiqd cannot fetch with its limits: {}", gem,
                         problem);
            }
            continue;
        }
        if (p.honoured)
            log.info("{}: its admission check runs in the app's runner before each job", gem);
        else
            log.warn(
                "the app's gem {} changes Sidekiq's fetch ({} in {}); kiqd fetches jobs itself "
                "and does not run that code, so what it declares there is not enforced",
                gem, p.module, p.target);
    }
}

}  // namespace

void adopt_app_declarations(Config& config, const runner::AppSettings& app, spdlog::logger& log) {
    config.max_retries = static_cast<int>(
        settle("max_retries", app.max_retries, config.max_retries_set, config.max_retries, log));
    config.dead_max_jobs = settle("dead_max_jobs", app.dead_max_jobs, config.dead_max_jobs_set,
                                  config.dead_max_jobs, log);
    config.dead_timeout_seconds = settle("dead_timeout_in_seconds", app.dead_timeout_seconds,
                                         config.dead_timeout_set, config.dead_timeout_seconds, log);
    adopt_capsules(config, app.capsules, log);
    adopt_classes(config, app.classes, log);
    report_fetch_patches(config, app.fetch_patches, log);
}

bool uses_gitlab_fetcher(const runner::AppSettings& app) {
    return std::any_of(app.fetch_patches.begin(), app.fetch_patches.end(),
                       [](const auto& p) { return p.gem == "gitlab-sidekiq-fetcher"; });
}

void adopt_app_settings(const runner::AppSettings& app, const Config& config, JobRetry& retry,
                        DeadSet& dead, spdlog::logger& log) {
    retry.set_max_retries(static_cast<int>(
        settle("max_retries", app.max_retries, config.max_retries_set, config.max_retries, log)));
    dead.set_limits(settle("dead_max_jobs", app.dead_max_jobs, config.dead_max_jobs_set,
                           config.dead_max_jobs, log),
                    settle("dead_timeout_in_seconds", app.dead_timeout_seconds,
                           config.dead_timeout_set, config.dead_timeout_seconds, log));
}

}  // namespace kiqd
