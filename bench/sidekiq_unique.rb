# The Sidekiq side of bench/unique_gem.sh, with the real sidekiq-unique-jobs gem (7.1 on Sidekiq
# 6.4.1, 8.x on Sidekiq 7.3 and 8.1: the test world it runs in decides, scripts/world). Kiqd::Noop
# declares the lock until_and_while_executing, as an application would with the gem:
#   * loaded by `ruby bench/sidekiq_unique.rb push N`: pushes N jobs (args [i], so N distinct
#     locks) through the gem's CLIENT middleware, which takes each job's client lock;
#   * loaded by `sidekiq -r <abs path>/bench/sidekiq_unique.rb`: the gem's SERVER middleware
#     releases the client lock and holds the run lock around each job.
# Quiet as bench/sidekiq_noop.rb: Sidekiq's logger at warn, set in configure_server, and the
# gem's logger at warn.
require "logger"
require "sidekiq"
require "sidekiq_unique_jobs"

Redis.silence_deprecations = true if defined?(Redis) && Redis.respond_to?(:silence_deprecations=)

SidekiqUniqueJobs.configure do |config|
  config.logger.level = Logger::WARN if config.respond_to?(:logger) && config.logger
  config.reaper = :none # the orphan reaper's passes are not part of a job's cost
end

Sidekiq.configure_client do |config|
  config.client_middleware { |chain| chain.add SidekiqUniqueJobs::Middleware::Client }
end

Sidekiq.configure_server do |config|
  config.logger.level = Logger::WARN
  config.client_middleware { |chain| chain.add SidekiqUniqueJobs::Middleware::Client }
  config.server_middleware { |chain| chain.add SidekiqUniqueJobs::Middleware::Server }
  SidekiqUniqueJobs::Server.configure(config)
end

module Kiqd
  class Noop
    include Sidekiq::Worker
    sidekiq_options queue: "default", lock: :until_and_while_executing

    def perform(*)
    end
  end
end

if $PROGRAM_NAME == __FILE__ && ARGV[0] == "push"
  Sidekiq.logger.level = Logger::WARN
  n = Integer(ARGV[1])
  n.times.each_slice(1000) do |slice|
    jids = Sidekiq::Client.push_bulk("class" => Kiqd::Noop, "args" => slice.map { |i| [i] })
    abort "push: the gem's client refused #{slice.size - jids.compact.size} jobs" if jids.compact.size != slice.size
  end
  puts "#{Sidekiq::VERSION} sidekiq-unique-jobs #{SidekiqUniqueJobs::VERSION}"
end
