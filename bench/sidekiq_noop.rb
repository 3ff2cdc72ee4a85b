# Loaded by bench/run and bench/core_throughput.sh with `sidekiq -r <abs path>/bench/sidekiq_noop.rb`
# (Debian's Sidekiq 6.4.1, or a test world's through `scripts/world WORLD sidekiq`). The Ruby twin
# of kiqd's built-in Kiqd::Noop handler, so both systems drain the very same payloads.
#
# Logging: quiet (warn) by default, i.e. Sidekiq at its fastest, with no per-job start/done lines.
# SIDEKIQ_BENCH_LOG=default leaves Sidekiq's own default (info: two lines per job), the "Sidekiq,
# default logging" rows. The level must be set inside configure_server: a level set when this
# file is required does not survive the CLI's boot (measured: such a Sidekiq still wrote two
# lines per job), while configure_server blocks run after the CLI has set up its logger. The
# block's argument is the Sidekiq module on 6.4 and a Sidekiq::Config on 7.x; both have #logger.
require "logger"
require "sidekiq"

Sidekiq.configure_server { |c| c.logger.level = Logger::WARN } unless ENV["SIDEKIQ_BENCH_LOG"] == "default"

# Debian pairs sidekiq 6.4.1 with redis-rb 4.8, which prints a deprecation warning to stderr on
# every BRPOP (positional timeout in Sidekiq::BasicFetch) and on every heartbeat SADD. Silence
# it so the warnings cost as little as possible (the message string is still built per fetch).
# Sidekiq 7 uses redis-client and does not load redis-rb at all.
Redis.silence_deprecations = true if defined?(Redis) && Redis.respond_to?(:silence_deprecations=)

module Kiqd
  class Noop
    include Sidekiq::Worker # Sidekiq 7 keeps Worker as an alias of Sidekiq::Job

    def perform(*)
    end
  end
end
