// The schedule sections (see cron_config.hpp).
#include "config/cron_config.hpp"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "config/yaml_helpers.hpp"
#include "cron/cron_expression.hpp"
#include "cron/cron_flag.hpp"

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

// sidekiq-scheduler's `every:` / `interval:` (rufus-scheduler durations: "30s", "5m", "1h30m",
// "2d", a bare number of seconds; or [duration, {options}]) as the cron line that fires on the
// same period, aligned on the clock. rufus counts the period from each process's start, so every
// Ruby process fires on its own; on the clock, each run is claimed once across the fleet. A
// period the clock cannot divide evenly (7m, 90m) has no such line and is refused.
// sidekiq-scheduler's value alone, or the first of [value, {rufus options}].
YAML::Node value_of(const YAML::Node& v) {
    return v.IsSequence() && v.size() > 0 ? v[0] : v;
}

// A rufus-scheduler duration ("30s", "1h30m", a bare number of seconds; or [duration,
// {options}]) in seconds.
long long rufus_seconds(const std::string& k, const YAML::Node& v) {
    const YAML::Node d = value_of(v);
    if (!d.IsScalar()) type_error(k, v, "a duration such as 30s, 5m, 1h or 1d");
    const std::string text = d.Scalar();
    long long total = 0;
    size_t i = 0;
    static const std::map<char, long long> units{
        {'s', 1}, {'m', 60}, {'h', 3600}, {'d', 86400}, {'w', 7 * 86400}};
    while (i < text.size()) {
        size_t j = i;
        while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
        if (j == i || j - i > 9)
            throw ConfigError(k, "'" + text + "' is not a duration (30s, 5m, 1h, 1d, 1w)",
                              line_of(d));
        const long long n = std::stoll(text.substr(i, j - i));
        if (j == text.size()) {
            total += n;  // a bare number: seconds
            break;
        }
        const auto u = units.find(text[j]);
        if (u == units.end())
            throw ConfigError(k, "'" + text + "' is not a duration (30s, 5m, 1h, 1d, 1w)",
                              line_of(d));
        total += n * u->second;
        i = j + 1;
    }
    if (total > kMaxDurationSeconds) throw ConfigError(k, max_duration_text(), line_of(d));
    return total;
}

std::string every_as_cron(const std::string& k, const YAML::Node& v) {
    const long long total = rufus_seconds(k, v);
    const YAML::Node d = value_of(v);
    const std::string text = d.Scalar();
    const auto divides = [](long long period, long long whole) {
        return period > 0 && period <= whole && whole % period == 0;
    };
    auto step = [](long long n) { return n == 1 ? std::string("*") : "*/" + std::to_string(n); };
    if (divides(total, 60)) return step(total) + " * * * * *";
    if (total % 60 == 0 && divides(total / 60, 60)) return step(total / 60) + " * * * *";
    if (total % 3600 == 0 && divides(total / 3600, 24)) return "0 " + step(total / 3600) + " * * *";
    if (total == 86400) return "0 0 * * *";
    if (total == 7 * 86400) return "0 0 * * 0";
    throw ConfigError(k,
                      "'" + text +
                          "' does not divide the minute, hour or day evenly: kiqd fires "
                          "schedules on the clock (so each run is claimed once across the "
                          "fleet); write it as a cron line",
                      line_of(d));
}

// sidekiq-scheduler's `at:` (what rufus-scheduler's parse_at reads, in its common forms):
// "2030/12/12 23:30:00", "2030-12-12", "2030-12-12T23:30:00Z", with an optional zone (a tz
// database name, "UTC", an offset such as +09:00); without one, the machine's local zone.
double at_time(const std::string& k, const YAML::Node& v) {
    const YAML::Node d = value_of(v);
    if (!d.IsScalar()) type_error(k, v, "a time such as 2030/12/12 23:30:00");
    const std::string text = d.Scalar();
    static const std::regex form(
        R"(^\s*(\d{4})[-/](\d{1,2})[-/](\d{1,2})(?:[ T](\d{1,2}):(\d{2})(?::(\d{2}))?)?)"
        R"(\s*(Z|[+-]\d{2}:?\d{2}|[A-Za-z][A-Za-z0-9_+/-]*)?\s*$)");
    std::smatch m;
    if (!std::regex_match(text, m, form))
        throw ConfigError(
            k, "'" + text + "' is not a time (2030/12/12 23:30:00, 2030-12-12T23:30Z)", line_of(d));
    auto num = [&](int i) { return m[i].matched ? std::stoi(m[i].str()) : 0; };
    const int month = num(2), day = num(3), hour = num(4), min = num(5), sec = num(6);
    if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || min > 59 || sec > 59)
        throw ConfigError(k, "'" + text + "' is not a valid time", line_of(d));
    std::string zone = m[7].str();
    if (zone == "Z") zone = "UTC";
    if (zone.size() == 5 && (zone[0] == '+' || zone[0] == '-'))  // +0900 → +09:00
        zone = zone.substr(0, 3) + ":" + zone.substr(3);
    try {
        // A cron line's zone rules (tz database names, offsets, the local zone when none).
        const auto in_zone = CronExpression::parse("* * * * *" + (zone.empty() ? "" : " " + zone));
        return static_cast<double>(in_zone.instant(num(1), month, day, hour, min, sec));
    } catch (const CronError& e) {
        throw ConfigError(k, "'" + text + "': " + e.what(), line_of(d));
    }
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
         {"namespace",
          [&](const auto& k, const auto& v) {
              s.ns = non_empty_string(k, v);
              if (s.ns == "*") throw ConfigError(k, "cannot be '*'", line_of(v));
          }},
         {"every",
          [&](const auto& k, const auto& v) {
              s.cron = every_as_cron(k, v);
              cron_node = v;
          }},
         {"interval",
          [&](const auto& k, const auto& v) {
              s.cron = every_as_cron(k, v);
              cron_node = v;
          }},
         {"at",
          [&](const auto& k, const auto& v) {
              s.once_at = at_time(k, v);
              cron_node = v;
          }},
         {"in",
          [&](const auto& k, const auto& v) {
              s.once_in = static_cast<double>(rufus_seconds(k, v));
              cron_node = v;
          }},
         // sidekiq-scheduler's per-job knobs with no meaning for a cron enqueue here.
         {"include_metadata", ignored},
         {"rufus_scheduler_options", ignored}},
        "unknown key (known: name, cron, class, args, queue, description, enabled, active_job, "
        "date_as_argument, namespace)");
    if (s.name.empty()) {
        if (name_required) throw ConfigError(key + ".name", "is missing", s.line);
        throw ConfigError(key, "has an empty name", s.line);
    }
    const int forms = !s.cron.empty() + s.once_at.has_value() + s.once_in.has_value();
    if (forms == 0)
        throw ConfigError(key + ".cron", "is missing (or every:, interval:, at:, in:)", s.line);
    if (forms > 1)
        throw ConfigError(key, "takes one of cron:, every:, interval:, at: and in:", s.line);
    if (!has_class) throw ConfigError(key + ".class", "is missing", s.line);
    if (s.one_off()) return s;
    try {
        CronExpression::parse_cronish(s.cron);
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

namespace {

void parse_schedule_list(const std::string& key, const YAML::Node& n,
                         std::vector<CronScheduleSpec>& out) {
    for (size_t i = 0; i < n.size(); ++i)
        out.push_back(parse_entry(key + "[" + std::to_string(i) + "]", n[i], "", true));
}

// A map value that is one schedule rather than a map of them.
bool looks_like_entry(const YAML::Node& n) {
    return n.IsMap() && (n["cron"] || n["class"] || n["klass"]);
}

}  // namespace

void parse_cron(const YAML::Node& n, Config& c) {
    if (n.IsNull()) return;
    if (n.IsSequence()) return parse_schedule_list("cron", n, c.cron);
    if (!n.IsMap()) type_error("cron", n, "a list of {name, cron, class, ...} or a map");
    for (const auto& kv : n) {
        if (!kv.first.IsScalar() || kv.first.Scalar().empty())
            throw ConfigError("cron", "schedule names must be non-empty strings",
                              line_of(kv.first));
        const std::string name = strip_symbol(kv.first.Scalar());
        const std::string key = "cron." + name;
        const YAML::Node& v = kv.second;
        // The settings are scalars (or a list of names); a schedule is always a map.
        if (name == "layout" && v.IsScalar()) {
            const std::string l = strip_symbol(v.Scalar());
            if (l == "auto")
                c.cron_layout = CronLayoutSetting::auto_detect;
            else if (l == "v1" || l == "1")
                c.cron_layout = CronLayoutSetting::v1;
            else if (l == "v2" || l == "2")
                c.cron_layout = CronLayoutSetting::v2;
            else
                throw ConfigError(key, "must be auto, v1 (sidekiq-cron 1.x) or v2 (2.x)",
                                  line_of(v));
        } else if (name == "namespace" && v.IsScalar()) {
            c.cron_namespace = non_empty_string(key, v);
            if (c.cron_namespace == "*") throw ConfigError(key, "cannot be '*'", line_of(v));
        } else if (name == "namespaces" && (v.IsSequence() || v.IsScalar())) {
            c.cron_namespaces.clear();
            if (v.IsScalar()) type_error(key, v, "a list of namespace names");
            for (const auto& item : v) {
                c.cron_namespaces.push_back(non_empty_string(key, item));
                if (c.cron_namespaces.back() == "*")
                    throw ConfigError(key, "cannot list '*'", line_of(item));
            }
        } else if (name == "reschedule_grace_period" && v.IsScalar()) {
            // The gem's setting of the same name: how late a run may still be enqueued.
            c.cron_reschedule_grace_period = whole_seconds(key, v);
            if (c.cron_reschedule_grace_period < 0)
                throw ConfigError(key, "must be 0 or more seconds", line_of(v));
        } else if ((name == "history_size" || name == "cron_history_size") && v.IsScalar()) {
            // The gem's cron_history_size: the jid history entries kept per job.
            const long long size = as_int(key, v);
            if (size < 1 || size > 100000)
                throw ConfigError(key, "must be between 1 and 100000", line_of(v));
            c.cron_history_size = static_cast<int>(size);
        } else if (name == "schedule" && v.IsSequence()) {
            parse_schedule_list(key, v, c.cron);
        } else if (name == "schedule" && v.IsMap() && !looks_like_entry(v)) {
            parse_schedule_map(key, v, c.cron);
        } else {
            c.cron.push_back(parse_entry(key, v, kv.first.Scalar(), false));
        }
    }
}

void load_cron_schedule_file(const std::string& key, const YAML::Node& n, Config& c) {
    const std::string given = non_empty_string(key, n);
    c.cron_schedule_file = given;
    std::string path = given;
    // The gem: the name as given, else the same with .yaml for .yml.
    if (!std::filesystem::exists(path) && path.size() > 4 &&
        path.compare(path.size() - 4, 4, ".yml") == 0)
        path = path.substr(0, path.size() - 4) + ".yaml";
    std::ifstream in(path);
    if (!in)
        throw ConfigError(key,
                          "cannot read '" + given + "' (relative to the working directory, " +
                              std::filesystem::current_path().string() + ")",
                          line_of(n));
    std::stringstream text;
    text << in.rdbuf();
    YAML::Node root;
    try {
        root = YAML::Load(expand_erb(text.str()));
    } catch (const YAML::Exception& e) {
        throw ConfigError(key + " (" + path + ")", e.msg, e.mark.line >= 0 ? e.mark.line + 1 : -1);
    }
    const std::string where = key + " (" + path + ")";
    if (root.IsNull()) return;  // an empty file: no schedule (the gem would refuse it)
    if (root.IsSequence()) return parse_schedule_list(where, root, c.cron);
    if (!root.IsMap())
        throw ConfigError(where, "must hold a map of name → job or a list of jobs", line_of(root));
    parse_schedule_map(where, root, c.cron);
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
