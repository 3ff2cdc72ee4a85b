# Loaded by bench/run's latency section with `sidekiq -r <abs path>/bench/sidekiq_record.rb`.
# The Ruby twin of kiqd_test_daemon's Test::Record as the benchmark uses it: the first thing
# perform does is take the time, then one RPUSH records {jid, started} in kiqd-test:ran.
require "json"
require "logger"
require "sidekiq"

Sidekiq.logger.level = Logger::WARN
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)

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
