# The application of bench/runners.sh, loaded both by kiqd-ruby-runner (--require) and by
# Sidekiq (`sidekiq -r`): a no-op job, a CPU-bound one (~5 ms of pure Ruby on the reference VM),
# an IO-bound one (waits 20 ms, as for a database query or an HTTP call, then makes one
# Sidekiq.redis call) and a mix (every tenth job CPU-bound, the others IO-bound), with logging
# at warn so neither system writes a line per job.
#
# The level is set inside configure_server: a level set when this file is required does not
# survive Sidekiq's CLI boot (such a Sidekiq still writes two lines per job; see bench/run's
# sidekiq_noop.rb). kiqd-ruby-runner never logs per job; the plain assignment covers it.
require "logger"
require "sidekiq"

Sidekiq.logger.level = Logger::WARN
Sidekiq.configure_server { |c| c.logger.level = Logger::WARN }
Redis.silence_deprecations = true if defined?(Redis) && Redis.respond_to?(:silence_deprecations=)

module Bench
  class RubyNoop
    include Sidekiq::Worker

    def perform(*)
    end
  end

  class RubyCpu
    include Sidekiq::Worker

    # Pure Ruby arithmetic: holds the GVL for the whole job.
    def perform(*)
      Bench.burn
    end
  end

  class RubyIo
    include Sidekiq::Worker

    def perform(*)
      Bench.wait_and_call
    end
  end

  class RubyMixed
    include Sidekiq::Worker

    def perform(i, *)
      (i % 10).zero? ? Bench.burn : Bench.wait_and_call
    end
  end

  def self.burn
    x = 0
    i = 0
    while i < (ENV["BENCH_CPU_LOOPS"] || 20_000).to_i
      x = (x * 31 + i) % 1_000_003
      i += 1
    end
    x
  end

  # sleep releases the GVL as a socket read does; the Redis call is the job's own connection.
  def self.wait_and_call
    sleep 0.02
    Sidekiq.redis { |r| r.get("bench:io") }
  end
end
