#include "kiqd/pause_strategy.hpp"

#include "kiqd/config.hpp"

namespace kiqd {

bool RedisFlagPauseStrategy::flag_set(const redis::Reply& reply) {
    if (reply.is_nil()) return false;
    const auto value = reply.str();
    return !(value.empty() || value == "0" || value == "false");
}

bool RedisFlagPauseStrategy::should_pause(redis::Connection& redis) const {
    return flag_set(redis.command({"GET", key_}));
}

PauseStrategyRegistry::PauseStrategyRegistry() {
    add("manual", [](const std::string&, const YAML::Node&) {
        return std::make_shared<ManualPauseStrategy>();
    });
    add("redis_flag", [](const std::string&, const YAML::Node& options) {
        const YAML::Node key = options.IsMap() ? options["key"] : YAML::Node();
        if (!key || !key.IsScalar() || key.Scalar().empty())
            throw std::invalid_argument("redis_flag needs key: <the Redis key of the flag>");
        return std::make_shared<RedisFlagPauseStrategy>(key.Scalar());
    });
}

void PauseStrategyRegistry::add(std::string name, PauseStrategyFactory factory) {
    factories_[std::move(name)] = std::move(factory);
}

void PauseStrategyRegistry::declare(std::string job_class, std::string strategy,
                                    YAML::Node options) {
    declared_[std::move(job_class)] = {std::move(strategy), std::move(options)};
}

PauseStrategies::PauseStrategies(const Config& config, const PauseStrategyRegistry& registry) {
    auto build = [&](const std::string& job_class, const std::string& name,
                     const YAML::Node& options, int line) {
        const std::string key = "handlers." + job_class + ".pause_control";
        if (name == "none") {  // the YAML's way to take back a strategy declared in C++
            by_class_.erase(job_class);
            return;
        }
        auto it = registry.factories_.find(name);
        if (it == registry.factories_.end()) {
            std::string known;
            for (const auto& [n, f] : registry.factories_) known += (known.empty() ? "" : ", ") + n;
            throw ConfigError(key, "unknown strategy \"" + name + "\" (known: " + known + ")",
                              line);
        }
        try {
            by_class_[job_class] = it->second(job_class, options);
        } catch (const ConfigError&) {
            throw;
        } catch (const std::exception& e) {
            throw ConfigError(key, e.what(), line);
        }
    };
    for (const auto& [job_class, declared] : registry.declared_)
        build(job_class, declared.first, declared.second, -1);
    for (const auto& [job_class, spec] : config.classes) {
        if (spec.pause_control)
            build(job_class, spec.pause_control->strategy, spec.pause_control->options,
                  spec.pause_control->line);
    }
}

const PauseStrategy* PauseStrategies::find(const std::string& job_class) const {
    auto it = by_class_.find(job_class);
    return it == by_class_.end() ? nullptr : it->second.get();
}

}  // namespace kiqd
