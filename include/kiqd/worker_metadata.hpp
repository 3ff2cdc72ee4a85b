#pragma once
// WorkerMetadata: what a job class says about itself, after GitLab's worker attributes
// (docs/data-model.md#worker-metadata): urgency (high | low | throttled), resource boundary (cpu |
// memory | unknown), feature category, external dependencies, idempotency and free tags.
// Declared per class in the YAML (`handlers: {Cls: {urgency: high, ...}}`) or in C++
// (HandlerRegistry::add with a WorkerMetadata). Metadata is class data, never part of the job
// payload. Parsed and validated on the main thread at startup (a bad value is a ConfigError,
// exit 78), then read-only: the metadata middleware, the routing rules, `--selector` and the
// cpu-bound cap read it from any thread without locks.
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace kiqd {

enum class Urgency { high, low, throttled };
enum class ResourceBoundary { unknown, cpu, memory };

struct WorkerMetadata {
    Urgency urgency = Urgency::low;  // GitLab's default
    ResourceBoundary resource_boundary = ResourceBoundary::unknown;
    std::string feature_category;  // "" = not declared
    bool external_dependencies = false;
    bool idempotent = false;
    std::vector<std::string> tags;
    bool declared = false;  // some metadata key was given (YAML) or a C++ declaration was made
};

// GitLab's targets per urgency: how long a job may wait in its queue (scheduling latency:
// enqueued_at → start) and how long it may run. nullopt = no target (throttled scheduling).
struct UrgencyTargets {
    std::optional<std::chrono::milliseconds> scheduling;
    std::optional<std::chrono::milliseconds> execution;
};
UrgencyTargets targets_of(Urgency urgency);

const char* to_string(Urgency urgency);
const char* to_string(ResourceBoundary boundary);
std::optional<Urgency> parse_urgency(const std::string& text);
std::optional<ResourceBoundary> parse_resource_boundary(const std::string& text);

// True when `k` (a key of a `handlers:` entry, already without a leading ':') is a metadata key:
// urgency, resource_boundary, feature_category, external_dependencies, idempotent, tags. Parses
// the value into `md` (marking it declared); throws ConfigError naming `key` for a bad value.
bool parse_metadata_option(const std::string& k, const std::string& key, const YAML::Node& v,
                           WorkerMetadata& md);

// The rules between attributes (GitLab's): a high-urgency worker can be neither memory-bound nor
// have external dependencies. Throws ConfigError naming `where` (e.g. "handlers.Foo") and `line`.
void validate_metadata(const std::string& where, const WorkerMetadata& md, int line = -1);

}  // namespace kiqd
