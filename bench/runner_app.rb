# The application of bench/runners.sh, loaded both by kiqd-ruby-runner (--require) and by
# Sidekiq (`sidekiq -r`): a no-op job and a CPU-bound one (~5 ms of pure Ruby on the reference
# VM), with logging at warn so neither system writes a line per job.
#
# The level is set inside configure_server: a level set when this file is required does not
# survive Sidekiq's CLI boot (such a Sidekiq still writes two lines per job; see bench/run's
# sidekiq_noop.rb). kiqd-ruby-runner never logs per job; the plain assignment covers it.
require "logger"
require "sidekiq"

Sidekiq.logger.level = Logger::WARN
Sidekiq.configure_server { |c| c.logger.level = Logger::WARN }
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)

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
      x = 0
      i = 0
      while i < (ENV["BENCH_CPU_LOOPS"] || 20_000).to_i
        x = (x * 31 + i) % 1_000_003
        i += 1
      end
      x
    end
  end
end
