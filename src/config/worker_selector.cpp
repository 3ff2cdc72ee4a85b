#include "kiqd/worker_selector.hpp"

#include <algorithm>

namespace kiqd {
namespace {

std::string trim_blanks(const std::string& s) {
    const auto b = s.find_first_not_of(" \t");
    if (b == std::string::npos) return "";
    const auto e = s.find_last_not_of(" \t");
    return s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    size_t from = 0;
    for (;;) {
        const auto at = s.find(sep, from);
        out.push_back(s.substr(from, at == std::string::npos ? std::string::npos : at - from));
        if (at == std::string::npos) return out;
        from = at + 1;
    }
}

bool is_bool_attribute(const std::string& a) {
    return a == "has_external_dependencies" || a == "idempotent";
}

void check_value(const std::string& attribute, const std::string& value, const std::string& part) {
    auto bad = [&](const char* expected) {
        throw std::invalid_argument("'" + part + "': " + attribute + " must be " + expected +
                                    ", not '" + value + "'");
    };
    if (attribute == "urgency" && !parse_urgency(value)) bad("high, low or throttled");
    if (attribute == "resource_boundary" && !parse_resource_boundary(value))
        bad("cpu, memory or unknown");
    if (is_bool_attribute(attribute) && value != "true" && value != "false") bad("true or false");
}

}  // namespace

WorkerSelector WorkerSelector::parse(const std::string& query) {
    static const std::vector<std::string> attributes{
        "urgency",          "resource_boundary",
        "feature_category", "has_external_dependencies",
        "idempotent",       "tags",
        "worker_name",      "name",
        "queue_name"};
    WorkerSelector out;
    out.text_ = query;
    if (trim_blanks(query).empty()) throw std::invalid_argument("the query is empty");
    for (const auto& alternative : split(query, '|')) {
        std::vector<Condition> all;
        for (const auto& raw : split(alternative, '&')) {
            const std::string part = trim_blanks(raw);
            if (part.empty())
                throw std::invalid_argument("empty term in '" + query + "' (a stray '&' or '|'?)");
            Condition c;
            if (part == "*") {
                c.any = true;
                all.push_back(std::move(c));
                continue;
            }
            const auto ne = part.find("!=");
            const auto eq = part.find('=');
            if (eq == std::string::npos)
                throw std::invalid_argument("'" + part +
                                            "': expected attribute=value or attribute!=value");
            const size_t op = ne != std::string::npos && ne < eq ? ne : eq;
            c.negated = op == ne && ne != std::string::npos && ne < eq;
            c.attribute = trim_blanks(part.substr(0, op));
            const std::string rest = part.substr(op + (c.negated ? 2 : 1));
            if (std::find(attributes.begin(), attributes.end(), c.attribute) == attributes.end())
                throw std::invalid_argument(
                    "'" + part + "': unknown attribute '" + c.attribute +
                    "' (urgency, resource_boundary, feature_category, has_external_dependencies, "
                    "idempotent, tags, worker_name, name, queue_name)");
            for (const auto& v : split(rest, ',')) {
                std::string value = trim_blanks(v);
                if (value.empty()) throw std::invalid_argument("'" + part + "': empty value");
                if (value.find_first_of("=!") != std::string::npos)
                    throw std::invalid_argument("'" + part + "': '" + value +
                                                "' is not a value (a missing '&'?)");
                check_value(c.attribute, value, part);
                c.values.push_back(std::move(value));
            }
            all.push_back(std::move(c));
        }
        out.alternatives_.push_back(std::move(all));
    }
    return out;
}

bool WorkerSelector::holds(const Condition& c, const WorkerAttributes& w) {
    if (c.any) return true;
    auto in = [&](const std::string& v) {
        return std::find(c.values.begin(), c.values.end(), v) != c.values.end();
    };
    bool found = false;
    const auto& m = w.metadata;
    if (c.attribute == "urgency")
        found = in(to_string(m.urgency));
    else if (c.attribute == "resource_boundary")
        found = in(to_string(m.resource_boundary));
    else if (c.attribute == "feature_category")
        found = in(m.feature_category);
    else if (c.attribute == "has_external_dependencies")
        found = in(m.external_dependencies ? "true" : "false");
    else if (c.attribute == "idempotent")
        found = in(m.idempotent ? "true" : "false");
    else if (c.attribute == "tags")
        found = std::any_of(m.tags.begin(), m.tags.end(), in);
    else if (c.attribute == "worker_name")
        found = in(w.worker_name);
    else  // name, queue_name
        found = in(w.queue);
    return found != c.negated;
}

bool WorkerSelector::matches(const WorkerAttributes& worker) const {
    return std::any_of(alternatives_.begin(), alternatives_.end(), [&](const auto& all) {
        return std::all_of(all.begin(), all.end(),
                           [&](const Condition& c) { return holds(c, worker); });
    });
}

}  // namespace kiqd
