# Settings an app makes in Ruby (`configure_server`), taken by kiqd from its runner: the app's
# max_retries for the failures kiqd decides itself (a runner process that dies under a job:
# Kiqd::RunnerCrashed) and its dead_max_jobs for the dead set's trim; kiqd's config wins where
# it sets the same key, and says so once. Debian's Ruby and Sidekiq 6.4.1, kiqd-ruby-runner.
require "support"

class RunnerAppSettingsTest < Minitest::Test
  include KiqdInterop::Helpers

  RUNNER = File.join(KiqdInterop::ROOT, "runners", "ruby", "kiqd-ruby-runner")

  def app
    @app ||= write_ruby_script("settings_app.rb", <<~RUBY)
      require "sidekiq"
      Sidekiq.configure_server do |config|
        config.logger.level = Logger::WARN
        Sidekiq.options[:max_retries] = 0
        Sidekiq.options[:dead_max_jobs] = 3
      end
      class CrashJob
        include Sidekiq::Job
        def perform = Process.kill("KILL", Process.pid)
      end
      class FailJob
        include Sidekiq::Job
        def perform(_n) = raise(IOError, "fails")
      end
    RUBY
  end

  def start(config = {})
    start_kiqd({"concurrency" => 1,
                "runners" => {"app" => {"command" => ["/usr/bin/ruby", RUNNER, "--require", app],
                                        "processes" => 1}},
                "handlers" => {"*" => {"runner" => "app"}}}.merge(config))
  end

  def push(klass, *args)
    jid = SecureRandom.hex(12)
    redis.lpush("queue:default", JSON.generate("class" => klass, "args" => args, "jid" => jid,
                                               "queue" => "default", "retry" => true,
                                               "created_at" => Time.now.to_f, "enqueued_at" => Time.now.to_f))
    jid
  end

  def dead_jids = redis.zrange("dead", 0, -1).map { |m| JSON.parse(m)["jid"] }

  def test_the_apps_max_retries_and_dead_max_jobs_are_taken
    kiqd = start
    wait_until(30, "kiqd to take the app's settings") do
      kiqd.log.include?("max_retries: 0, from the app's Sidekiq configuration") &&
        kiqd.log.include?("dead_max_jobs: 3, from the app's Sidekiq configuration")
    end
    crashed = push("CrashJob")
    wait_until(30, "the crashed job in the dead set") { dead_jids.include?(crashed) }
    assert_equal 0, redis.zcard("retry"), "max_retries 0: no retry for Kiqd::RunnerCrashed"
    assert_equal "Kiqd::RunnerCrashed", JSON.parse(redis.zrange("dead", 0, -1).first)["error_class"]
    failed = 4.times.map { |i| push("FailJob", i) }
    wait_until(30, "the failed jobs in the dead set") { dead_jids.include?(failed.last) }
    # Sidekiq's trim (ZREMRANGEBYRANK 0 -dead_max_jobs) keeps dead_max_jobs - 1 entries.
    assert_equal 2, redis.zcard("dead"), "the app's dead_max_jobs trims the dead set"
    refute kiqd.log.include?("kiqd's config wins")
  end

  def test_kiqds_config_wins_and_says_so
    kiqd = start("max_retries" => 5)
    wait_until(30, "kiqd to compare the settings") do
      kiqd.log.include?("max_retries: kiqd's config says 5 and the app's Sidekiq configuration says 0; kiqd's config wins")
    end
    crashed = push("CrashJob")
    wait_until(30, "the crashed job in the retry set") do
      redis.zrange("retry", 0, -1).any? { |m| JSON.parse(m)["jid"] == crashed }
    end
    assert_empty dead_jids
  end
end
