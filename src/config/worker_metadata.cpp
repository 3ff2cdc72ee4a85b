#include "kiqd/worker_metadata.hpp"

#include <regex>

#include "config/yaml_helpers.hpp"

namespace kiqd {
namespace {

using config_detail::as_symbol;
using config_detail::line_of;

// Metadata flags name the value they reject, unlike the other sections' booleans.
bool boolean(const std::string& key, const YAML::Node& n) {
    const std::string s = as_symbol(key, n, "true or false");
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off") return false;
    throw ConfigError(key, "must be true or false, not '" + s + "'", line_of(n));
}

// Category and tag names appear in metric labels and in selectors, where ',', '&', '|', '='
// and '!' are operators: letters, digits, '_', '-', '.' and '/' only.
const std::regex& name_pattern() {
    static const std::regex p(R"(^[A-Za-z0-9_.\-/]+$)");
    return p;
}

}  // namespace

UrgencyTargets targets_of(Urgency urgency) {
    using std::chrono::milliseconds;
    switch (urgency) {
        case Urgency::high:
            return {milliseconds(10'000), milliseconds(10'000)};
        case Urgency::low:
            return {milliseconds(60'000), milliseconds(300'000)};
        case Urgency::throttled:
            return {std::nullopt, milliseconds(300'000)};
    }
    return {};
}

const char* to_string(Urgency urgency) {
    switch (urgency) {
        case Urgency::high:
            return "high";
        case Urgency::low:
            return "low";
        case Urgency::throttled:
            return "throttled";
    }
    return "low";
}

const char* to_string(ResourceBoundary boundary) {
    switch (boundary) {
        case ResourceBoundary::cpu:
            return "cpu";
        case ResourceBoundary::memory:
            return "memory";
        case ResourceBoundary::unknown:
            return "unknown";
    }
    return "unknown";
}

std::optional<Urgency> parse_urgency(const std::string& text) {
    if (text == "high") return Urgency::high;
    if (text == "low") return Urgency::low;
    if (text == "throttled") return Urgency::throttled;
    return std::nullopt;
}

std::optional<ResourceBoundary> parse_resource_boundary(const std::string& text) {
    if (text == "cpu") return ResourceBoundary::cpu;
    if (text == "memory") return ResourceBoundary::memory;
    if (text == "unknown") return ResourceBoundary::unknown;
    return std::nullopt;
}

bool parse_metadata_option(const std::string& k, const std::string& key, const YAML::Node& v,
                           WorkerMetadata& md) {
    if (k == "urgency") {
        const std::string s = as_symbol(key, v, "high, low or throttled");
        auto u = parse_urgency(s);
        if (!u)
            throw ConfigError(key, "must be high, low or throttled, not '" + s + "'", line_of(v));
        md.urgency = *u;
    } else if (k == "resource_boundary" || k == "worker_resource_boundary") {
        const std::string s = as_symbol(key, v, "cpu, memory or unknown");
        auto b = parse_resource_boundary(s);
        if (!b)
            throw ConfigError(key, "must be cpu, memory or unknown, not '" + s + "'", line_of(v));
        md.resource_boundary = *b;
    } else if (k == "feature_category") {
        const std::string s = as_symbol(key, v);
        if (!std::regex_match(s, name_pattern()))
            throw ConfigError(key, "must be a name of letters, digits, _ - . / (not '" + s + "')",
                              line_of(v));
        md.feature_category = s;
    } else if (k == "external_dependencies" || k == "has_external_dependencies") {
        md.external_dependencies = boolean(key, v);
    } else if (k == "idempotent") {
        md.idempotent = boolean(key, v);
    } else if (k == "tags") {
        if (!v.IsSequence()) throw ConfigError(key, "must be a list of names", line_of(v));
        md.tags.clear();
        for (const auto& t : v) {
            const std::string s = as_symbol(key, t, "a name");
            if (!std::regex_match(s, name_pattern()))
                throw ConfigError(key, "tag '" + s + "': letters, digits, _ - . / only",
                                  line_of(t));
            md.tags.push_back(s);
        }
    } else {
        return false;
    }
    md.declared = true;
    return true;
}

void validate_metadata(const std::string& where, const WorkerMetadata& md, int line) {
    if (md.urgency != Urgency::high) return;
    // GitLab's rules: a high-urgency job must be schedulable and finish within 10 s on a shared
    // fleet, which memory-bound jobs (few per node) and jobs waiting on other services cannot.
    if (md.resource_boundary == ResourceBoundary::memory)
        throw ConfigError(where + ".resource_boundary",
                          "a high-urgency worker cannot be memory-bound (use urgency: low or "
                          "throttled, or resource_boundary: cpu/unknown)",
                          line);
    if (md.external_dependencies)
        throw ConfigError(where + ".external_dependencies",
                          "a high-urgency worker cannot have external dependencies (use "
                          "urgency: low or throttled)",
                          line);
}

}  // namespace kiqd
