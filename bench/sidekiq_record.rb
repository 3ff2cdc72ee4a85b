# Loaded by bench/run's latency section with `sidekiq -r <abs path>/bench/sidekiq_record.rb`.
# The Ruby twin of kiqd_test_daemon's Test::Record as the benchmark uses it: the first thing
# perform does is take the time, then one RPUSH records {jid, started} in kiqd-test:ran.
# Logging as in bench/sidekiq_noop.rb: warn, set in configure_server so that it survives the
# CLI's boot; SIDEKIQ_BENCH_LOG=default keeps Sidekiq's default (info, two lines per job).
require "json"
require "logger"
require "sidekiq"

Sidekiq.configure_server { |c| c.logger.level = Logger::WARN } unless ENV["SIDEKIQ_BENCH_LOG"] == "default"
Redis.silence_deprecations = true if defined?(Redis) && Redis.respond_to?(:silence_deprecations=)

module Test
  class Record
    include Sidekiq::Worker

    def perform(*)
      started = Time.now.to_f
      Sidekiq.redis do |c|
        c.rpush("kiqd-test:ran", JSON.generate({"jid" => jid, "started" => started}))
      end
    end
  end
end
