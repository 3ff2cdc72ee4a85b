# Loaded by bench/core_throughput.sh with `sidekiq -r <abs path>/bench/sidekiq_noop.rb`.
# The Ruby twin of kiqd's built-in Kiqd::Noop handler, so both systems drain the
# very same payloads. Logging at warn: no per-job start/done lines, i.e. Sidekiq
# at its fastest (kiqd is measured both with and without its per-job lines).
require "logger"
require "sidekiq"

Sidekiq.logger.level = Logger::WARN

# Debian pairs sidekiq 6.4.1 with redis-rb 4.8, which prints a deprecation
# warning to stderr on every BRPOP (positional timeout in Sidekiq::BasicFetch)
# and on every heartbeat SADD. Silence it so the warnings cost as little as
# possible (the message string is still built per fetch).
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)

module Kiqd
  class Noop
    include Sidekiq::Worker

    def perform(*)
    end
  end
end
