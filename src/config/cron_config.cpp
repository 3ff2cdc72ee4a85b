// The schedule sections (see cron_config.hpp).
#include "config/cron_config.hpp"

#include <nlohmann/json.hpp>
#include <set>

#include "common/cron_expression.hpp"
#include "common/cron_flag.hpp"
#include "config/yaml_helpers.hpp"

namespace kiqd::config_detail {
namespace {

nlohmann::json yaml_value(const YAML::Node& n) {
    if (n.IsNull()) return nullptr;
    if (n.IsSequence()) {
        auto a = nlohmann::json::array();
        for (const auto& item : n) a.push_back(yaml_value(item));
        return a;
    }
    if (n.IsMap()) {
        auto o = nlohmann::json::object();
        for (const auto& kv : n) o[kv.first.Scalar()] = yaml_value(kv.second);
        return o;
    }
    const std::string& s = n.Scalar();
    if (n.Tag() == "!") return s;  // quoted: a string whatever it looks like
    if (s == "~" || s == "null") return nullptr;
    if (s == "true") return true;
    if (s == "false") return false;
    try {
        size_t used = 0;
        long long i = std::stoll(s, &used);
        if (used == s.size()) return i;
        double d = std::stod(s, &used);
        if (used == s.size()) return d;
    } catch (const std::exception&) {
    }
    return s;
}

bool ruby_truthy(const YAML::Node& n) {
    return n.IsScalar() && cron_flag_set(n.Scalar());
}

// One entry: `name` is given (map forms) or read from the entry (the list form).
CronScheduleSpec parse_entry(const std::string& key, const YAML::Node& n, std::string name,
                             bool name_required) {
    if (!n.IsMap()) type_error(key, n, "a map with cron and class");
    CronScheduleSpec s;
    s.key = key;
    s.line = line_of(n);
    s.name = std::move(name);
    YAML::Node cron_node;
    bool has_class = false;
    auto unsupported = [&](const std::string& k, const YAML::Node& v) {
        throw ConfigError(k,
                          "is not supported: kiqd runs cron schedules only (write it as a cron "
                          "line)",
                          line_of(v));
    };
    auto ignored = [](const std::string&, const YAML::Node&) {};
    read_map(
        n, key,
        {{"name", [&](const auto& k, const auto& v) { s.name = non_empty_string(k, v); }},
         {"cron",
          [&](const auto& k, const auto& v) {
              if (!v.IsScalar())
                  throw ConfigError(k,
                                    "must be a cron line (options such as first_in are not "
                                    "supported)",
                                    line_of(v));
              s.cron = non_empty_string(k, v);
              cron_node = v;
          }},
         {"class",
          [&](const auto& k, const auto& v) {
              s.job_class = non_empty_string(k, v);
              has_class = true;
          }},
         {"klass",
          [&](const auto& k, const auto& v) {
              s.job_class = non_empty_string(k, v);
              has_class = true;
          }},
         {"queue",
          [&](const auto& k, const auto& v) {
              s.queue = as_symbol(k, v);
              check_queue_name(k, s.queue, line_of(v));
          }},
         {"args",
          [&](const auto&, const auto& v) {
              // As sidekiq-cron's parse_args: a list stays a list, a map or scalar is one arg.
              auto j = yaml_value(v);
              if (!j.is_array()) j = nlohmann::json::array({j});
              s.args_json = j.dump();
          }},
         {"description", [&](const auto& k, const auto& v) { s.description = as_string(k, v); }},
         {"enabled", [&](const auto& k, const auto& v) { s.enabled = as_bool(k, v); }},
         {"status",
          [&](const auto& k, const auto& v) {
              const std::string st = as_string(k, v);
              if (st != "enabled" && st != "disabled")
                  throw ConfigError(k, "must be enabled or disabled", line_of(v));
              s.enabled = st == "enabled";
          }},
         {"active_job", [&](const auto&, const auto& v) { s.active_job = ruby_truthy(v); }},
         {"date_as_argument",
          [&](const auto&, const auto& v) { s.date_as_argument = ruby_truthy(v); }},
         {"every", unsupported},
         {"at", unsupported},
         {"in", unsupported},
         {"interval", unsupported},
         // sidekiq-scheduler's per-job knobs with no meaning for a cron enqueue here.
         {"include_metadata", ignored},
         {"rufus_scheduler_options", ignored}},
        "unknown key (known: name, cron, class, args, queue, description, enabled, active_job, "
        "date_as_argument)");
    if (s.name.empty()) {
        if (name_required) throw ConfigError(key + ".name", "is missing", s.line);
        throw ConfigError(key, "has an empty name", s.line);
    }
    if (s.cron.empty()) throw ConfigError(key + ".cron", "is missing", s.line);
    if (!has_class) throw ConfigError(key + ".class", "is missing", s.line);
    try {
        CronExpression::parse(s.cron);
    } catch (const CronError& e) {
        throw ConfigError(key + ".cron", "'" + s.cron + "': " + e.what(), line_of(cron_node));
    }
    return s;
}

}  // namespace

void parse_schedule_map(const std::string& key, const YAML::Node& n,
                        std::vector<CronScheduleSpec>& out) {
    if (n.IsNull()) return;
    if (!n.IsMap()) type_error(key, n, "a map of schedule name to {cron, class, ...}");
    for (const auto& kv : n) {
        if (!kv.first.IsScalar() || kv.first.Scalar().empty())
            throw ConfigError(key, "schedule names must be non-empty strings", line_of(kv.first));
        const std::string name = kv.first.Scalar();
        out.push_back(parse_entry(key + "." + name, kv.second, name, false));
    }
}

void parse_cron(const YAML::Node& n, std::vector<CronScheduleSpec>& out) {
    if (n.IsMap()) return parse_schedule_map("cron", n, out);
    if (n.IsNull()) return;
    if (!n.IsSequence()) type_error("cron", n, "a list of {name, cron, class, ...}");
    for (size_t i = 0; i < n.size(); ++i)
        out.push_back(parse_entry("cron[" + std::to_string(i) + "]", n[i], "", true));
}

void parse_scheduler(const YAML::Node& n, std::vector<CronScheduleSpec>& out) {
    if (n.IsNull()) return;
    if (!n.IsMap()) type_error("scheduler", n, "a map");
    bool enabled = true;
    YAML::Node schedule;
    auto ignored = [](const std::string&, const YAML::Node&) {};
    read_map(n, "scheduler",
             {{"schedule", [&](const auto&, const auto& v) { schedule = v; }},
              {"enabled", [&](const auto& k, const auto& v) { enabled = as_bool(k, v); }},
              // sidekiq-scheduler's own settings: Ruby-only, or meaningless for cron lines.
              {"dynamic", ignored},
              {"dynamic_every", ignored},
              {"listened_queues_only", ignored},
              {"rufus_scheduler_options", ignored}});
    std::vector<CronScheduleSpec> entries;
    if (schedule) parse_schedule_map("scheduler.schedule", schedule, entries);
    if (!enabled) return;  // checked all the same, so a typo is caught before it is enabled
    for (auto& e : entries) out.push_back(std::move(e));
}

void check_cron_names(const std::vector<CronScheduleSpec>& specs) {
    std::set<std::string> seen;
    for (const auto& s : specs)
        if (!seen.insert(s.name).second)
            throw ConfigError(s.key, "the schedule name '" + s.name + "' is used twice", s.line);
}

}  // namespace kiqd::config_detail
