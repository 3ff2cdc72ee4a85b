#pragma once
// Pause strategies: what decides that a worker class's jobs are parked instead of run (the model
// is GitLab's pause_control, docs/data-model.md#pause-control-keys). A class names its strategy in
// the YAML
// (`handlers: {SearchJob: {pause_control: {strategy: redis_flag, key: search:paused}}}`) or
// from C++ (PauseStrategyRegistry::declare); the YAML wins.
//
// Built-in strategies:
//   manual      paused while an operator has paused the class (`kiqd pause worker CLASS`). The
//               operator's pause applies to every class, so naming it only documents intent.
//   redis_flag  paused while the Redis key `key` holds a value other than "", "0" or "false"
//               (a flag another system sets: a migration, a maintenance window).
// Custom strategies are registered from C++ (or a plugin) under a name with a factory.
//
// Strategies are asked on the pause-control thread only (pause_controller.hpp), every
// refresh_interval, never on a processor thread: a slow strategy delays the pause, not jobs.
// The registry is filled before start and read-only afterwards.
#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "kiqd/redis/connection.hpp"

namespace kiqd {

struct Config;

class PauseStrategy {
  public:
    virtual ~PauseStrategy() = default;
    // True while the class's jobs must be parked. `redis` is the pause-control thread's
    // connection. Throwing means "don't know": the previous decision stays.
    virtual bool should_pause(redis::Connection& redis) const = 0;
    // Stored next to parked jobs so that any process of the fleet, even one whose config does
    // not know the class, can tell whether to resume them: "manual", "redis_flag:<key>", or
    // "custom:<name>" (resumed only by processes that know the strategy).
    virtual std::string descriptor() const = 0;
};

// The operator's pause alone (the SET of paused workers is read by the controller for every
// class): this strategy adds nothing to it.
class ManualPauseStrategy final : public PauseStrategy {
  public:
    bool should_pause(redis::Connection&) const override { return false; }
    std::string descriptor() const override { return "manual"; }
};

class RedisFlagPauseStrategy final : public PauseStrategy {
  public:
    explicit RedisFlagPauseStrategy(std::string key) : key_(std::move(key)) {}
    bool should_pause(redis::Connection& redis) const override;
    std::string descriptor() const override { return "redis_flag:" + key_; }
    static bool flag_set(const redis::Reply& get_reply);  // GET's reply: set and not "0"/"false"

  private:
    std::string key_;  // as configured, without the key prefix (it is another system's flag)
};

// Builds a strategy for one class from its YAML options (the whole `pause_control:` map, or a
// null node for the plain-name form). Throw ConfigError (or std::invalid_argument) for bad
// options.
using PauseStrategyFactory = std::function<std::shared_ptr<const PauseStrategy>(
    const std::string& job_class, const YAML::Node& options)>;

class PauseStrategyRegistry {
  public:
    PauseStrategyRegistry();  // with manual and redis_flag
    void add(std::string name, PauseStrategyFactory factory);
    // A class's strategy declared in C++; the class's `pause_control:` in the YAML wins.
    void declare(std::string job_class, std::string strategy, YAML::Node options = {});
    bool contains(const std::string& name) const { return factories_.count(name) > 0; }

  private:
    friend class PauseStrategies;
    std::map<std::string, PauseStrategyFactory> factories_;
    std::map<std::string, std::pair<std::string, YAML::Node>> declared_;  // class → (name, opts)
};

// The strategy of every class that has one, resolved once at start. Read-only afterwards.
class PauseStrategies {
  public:
    PauseStrategies() = default;
    // Throws ConfigError naming handlers.<Class>.pause_control for an unknown strategy name or
    // bad options.
    PauseStrategies(const Config& config, const PauseStrategyRegistry& registry);
    const std::map<std::string, std::shared_ptr<const PauseStrategy>>& by_class() const {
        return by_class_;
    }
    const PauseStrategy* find(const std::string& job_class) const;

  private:
    std::map<std::string, std::shared_ptr<const PauseStrategy>> by_class_;
};

}  // namespace kiqd
