#pragma once
// The sidekiq-fair_tenant gem's `enqueues_key`: a Ruby format string naming the ZSET a tenant's
// enqueues are counted in. Checked when the config is loaded (`fair_tenant.enqueues_key`,
// SIDEKIQ_FAIR_TENANT_ENQUEUES_KEY), expanded per job by fair-tenant rerouting
// (middleware/fair_tenant.hpp). Pure functions: any thread.
#include <optional>
#include <string>

namespace kiqd {

// Only %<queue>s, %<job_class>s, %<fair_tenant>s and %% are supported. nullopt when `format` is
// fine, else what is wrong with it (a ConfigError message).
std::optional<std::string> enqueues_key_problem(const std::string& format);
std::string format_enqueues_key(const std::string& format, const std::string& queue,
                                const std::string& job_class, const std::string& tenant);

}  // namespace kiqd
