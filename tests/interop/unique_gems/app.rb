# The Ruby side of the sidekiq-unique-jobs interop suite (test_unique_gems_interop.rb), loaded by
# its child processes: the pusher (pusher.rb, the gem's CLIENT middleware) and the reference
# Ruby Sidekiq server (`sidekiq -r app.rb`, the gem's SERVER middleware). Runs on either gem
# line: 7.1.33 on Sidekiq 6.4.1, 8.1.0 on Sidekiq 7.3.10 or 8.1.7 (the world it is started in
# through scripts/world decides).
#
# Every worker is a gated job, args [key, gate, mode], with the same behaviour as the
# Test::Gated::* handlers of kiqd_test_daemon (tests/support/test_daemon.cpp):
#   RPUSH kiqd-test:started <jid>, wait until the key kiqd-test:gate:<gate> exists, then
#   raise Test::FirstAttempt when mode is "fail" and this is the first attempt, else
#   RPUSH kiqd-test:done <jid>.
require "sidekiq"
require "sidekiq_unique_jobs"

Sidekiq.logger.level = Logger::WARN if Sidekiq.respond_to?(:logger) && Sidekiq.logger

module Test
  class FirstAttempt < StandardError; end

  module Gated
    module Perform
      def perform(_key, gate, mode = "ok")
        Sidekiq.redis do |r|
          r.call("RPUSH", "kiqd-test:started", jid)
          sleep 0.02 until r.call("EXISTS", "kiqd-test:gate:#{gate}").to_i == 1
          if mode == "fail" && !@retried
            raise FirstAttempt, "first attempt fails"
          end
          r.call("RPUSH", "kiqd-test:done", jid)
        end
      end
    end

    # One class per lock type; sidekiq_options as an app would write them (the gem's defaults
    # for everything else: lock_timeout 0, lock_ttl nil, on_conflict nil).
    {
      "UntilAndWhileExecuting" => :until_and_while_executing,
      "UntilExecuting" => :until_executing,
      "UntilExecuted" => :until_executed,
      "WhileExecuting" => :while_executing,
    }.each do |name, lock|
      klass = Class.new do
        include Sidekiq::Worker
        include Perform
        sidekiq_options queue: "default", retry: 3, lock: lock, lock_args_method: ->(args) { [args[0]] }
      end
      const_set(name, klass)
    end

    # until_and_while_executing whose server conflicts are rescheduled (the gem re-pushes the
    # copy with perform_in(5) through its client).
    klass = Class.new do
      include Sidekiq::Worker
      include Perform
      sidekiq_options queue: "default", retry: 3, lock: :until_and_while_executing,
                      on_conflict: { client: :log, server: :reschedule },
                      lock_args_method: ->(args) { [args[0]] }
    end
    const_set("UntilAndWhileExecutingReschedule", klass)
  end
end

# "first attempt" the same way kiqd_test_daemon decides it: the payload has no retry_count yet.
module Test::Gated::RetryAware
  def call(worker, job, _queue)
    worker.instance_variable_set(:@retried, job.key?("retry_count"))
    yield
  end
end

# Outermost on the reference server: counts the jobs inside the server's middleware chain, so
# that a copy the gem holds in its server middleware (waiting for or rescheduled by the run
# lock) counts as work in flight, not as a drained queue. RPUSH kiqd-test:entered <jid> on the
# way in and kiqd-test:left <jid> on the way out, whatever the chain did.
class Test::Gated::InFlight
  include Sidekiq::ServerMiddleware if defined?(Sidekiq::ServerMiddleware)

  def call(_worker, job, _queue)
    Sidekiq.redis { |r| r.call("RPUSH", "kiqd-test:entered", job["jid"]) }
    yield
  ensure
    Sidekiq.redis { |r| r.call("RPUSH", "kiqd-test:left", job["jid"]) }
  end
end

class Test::Gated::RetryMarker
  include Test::Gated::RetryAware
  include Sidekiq::ServerMiddleware if defined?(Sidekiq::ServerMiddleware)
end

SidekiqUniqueJobs.configure do |config|
  config.reaper = :ruby
  config.reaper_interval = 3600 # the tests call the reaper themselves
  config.logger.level = Logger::WARN if config.respond_to?(:logger) && config.logger
end

Sidekiq.configure_client do |config|
  config.client_middleware { |chain| chain.add SidekiqUniqueJobs::Middleware::Client }
end

Sidekiq.configure_server do |config|
  # Retries and scheduled jobs come due within ~1 s, without the poller's first 10 s wait.
  if Sidekiq::VERSION >= "7"
    config[:poll_interval_average] = 1
  else
    Sidekiq.options[:poll_interval_average] = 1
  end
  config.client_middleware { |chain| chain.add SidekiqUniqueJobs::Middleware::Client }
  config.server_middleware do |chain|
    chain.add Test::Gated::InFlight
    chain.add Test::Gated::RetryMarker
    chain.add SidekiqUniqueJobs::Middleware::Server
  end
  SidekiqUniqueJobs::Server.configure(config)
end
