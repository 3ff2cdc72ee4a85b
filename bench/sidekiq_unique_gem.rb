# Loaded by bench/unique_gem_rows.sh with Sidekiq 7.3 and sidekiq-unique-jobs 8.1 (run as
# `scripts/world sidekiq73 sidekiq -r <abs path>/bench/sidekiq_unique_gem.rb`): Kiqd::Noop
# (bench/sidekiq_noop.rb) behind the gem's server middleware, which handles the lock the gem's
# client took for each pushed job, as in an app that uses the gem.
require_relative "sidekiq_noop"
require "sidekiq_unique_jobs"

SidekiqUniqueJobs.configure do |config|
  config.logger.level = Logger::WARN
  config.reaper = :none # the drain measures the jobs, not the orphan reaper
end

Sidekiq.configure_server do |config|
  config.client_middleware { |chain| chain.add SidekiqUniqueJobs::Middleware::Client }
  config.server_middleware { |chain| chain.add SidekiqUniqueJobs::Middleware::Server }
  SidekiqUniqueJobs::Server.configure(config)
end
