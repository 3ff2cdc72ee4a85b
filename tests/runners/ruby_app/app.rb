# A small plain Sidekiq application with an ActiveJob job, run by kiqd through kiqd-ruby-runner in
# tests/integration/runner_test.cpp on Debian's Sidekiq 6.4.1, and on 7.3 and 8.1 inside the test
# worlds (ctest's runner_sidekiq73 and runner_sidekiq81). Every job records what it did in the
# application's own Redis (APP_REDIS_URL, which the test gives kiqd's runners), so the test
# reads the results where the application wrote them.
require "json"
# BOOT_LOG: one line per boot of the application (a preloading runner boots it once).
File.open(ENV["BOOT_LOG"], "a") { |f| f.puts Process.pid } if ENV["BOOT_LOG"]
require "sidekiq"
require "sidekiq/rails" if Sidekiq::VERSION.to_i >= 7 # 7.x's ActiveJob adapter wraps jobs in its class
require "active_job"
require "active_job/queue_adapters/sidekiq_adapter"

ActiveJob::Base.queue_adapter = :sidekiq
ActiveJob::Base.logger = Logger.new($stdout)

# redis-rb 4.8 warns on every SADD Sidekiq 6.4.1 sends.
Redis.silence_deprecations = true if defined?(Redis) && Redis.respond_to?(:silence_deprecations=)

redis = {url: ENV.fetch("APP_REDIS_URL")}
Sidekiq.configure_client { |c| c.redis = redis }

module App
  def self.record(list, value)
    Sidekiq.redis { |r| r.rpush("app:#{list}", value.is_a?(String) ? value : JSON.generate(value)) }
  end
end

# A server middleware the application configures: it sees every job kiqd runs and tags it.
class TagMiddleware
  def call(worker, job, queue)
    App.record("middleware", [worker.class.name, job["jid"], queue])
    Thread.current[:app_tag] = "tagged"
    yield
  ensure
    Thread.current[:app_tag] = nil
  end
end

Sidekiq.configure_server do |c|
  c.redis = redis
  c.server_middleware { |chain| chain.add TagMiddleware }
  c.death_handlers << ->(job, ex) { App.record("deaths", [job["class"], job["jid"], ex.class.name, ex.message]) }
end

class PlainJob
  include Sidekiq::Worker
  sidekiq_options queue: "default", retry: 3

  def perform(a, b)
    puts "plain job #{a} #{b}"
    App.record("done", ["PlainJob", jid, a, b, Thread.current[:app_tag], Process.pid])
  end
end

class FailingJob
  include Sidekiq::Worker
  sidekiq_options queue: "default", retry: 5, backtrace: true
  sidekiq_retry_in { |count, _ex| 1000 * (count + 1) }

  def perform(x)
    check_input(x)
  end

  def check_input(x)
    raise ArgumentError, "bad input #{x}"
  end
end

class ExhaustedJob
  include Sidekiq::Worker
  sidekiq_options queue: "default", retry: 0
  sidekiq_retries_exhausted do |msg, ex|
    App.record("exhausted", [msg["jid"], msg["error_class"], ex.class.name, ex.message])
  end

  def perform
    raise IOError, "disk gone"
  end
end

class GreetJob < ActiveJob::Base
  queue_as :default

  def perform(name)
    App.record("done", ["GreetJob", job_id, name, provider_job_id])
  end
end

# Misbehaviour on request: the runner dies, hangs, or writes garbage on the protocol socket.
class TroubleJob
  include Sidekiq::Worker
  sidekiq_options queue: "default", retry: 1

  def perform(mode, key = nil)
    App.record("started", [mode, key, Process.pid, Process.ppid])
    case mode
    when "exit" then exit!(3)
    when "kill" then Process.kill(:KILL, Process.pid)
    when "hang" then sleep
    when "garbage"
      io = IO.for_fd(Integer(ENV.fetch("KIQD_RUNNER_FD")), autoclose: false)
      io.write("\x00\x00\x00\x03abc")
      io.flush
    when "long" then sleep 60 # until kiqd's shutdown stops it
    when "slow"
      sleep 3
      App.record("finished", [mode, key, Process.pid])
    end
  end
end

# Memory that stays: for max_rss_mb.
class GrowJob
  include Sidekiq::Worker
  sidekiq_options queue: "default", retry: false
  KEEP = []

  def perform(mb)
    KEEP << ("x" * (mb * 1024 * 1024))
    App.record("done", ["GrowJob", jid, Process.pid])
  end
end

require_relative "threaded_jobs"
