# frozen_string_literal: true

# Retry decisions: with a kiqd that takes them (KIQD_RUNNER_DECISIONS=1), a tagged job runs
# inside the application's own Sidekiq::JobRetry (global and local, as its processor runs them),
# so a failure takes Sidekiq's own path in Sidekiq's order, with the real exception object: the
# retry count against the app's max_retries (or kiqd's, KIQD_RUNNER_MAX_RETRIES),
# sidekiq_retry_in, sidekiq_retries_exhausted, :kill and :discard, "dead": false. JobRetry's two
# Redis writes, the retry set's ZADD and the morgue, become the answer `fail TAG` with the
# decision (retry at its time, or dead); kiqd writes it and says `written TAG`, and only then
# does JobRetry go on (the death handlers), then the error handlers run and the answer
# `done TAG` ends the job. A failure that writes nothing (retry: false, :discard) is answered
# `fail TAG` with the decision discard once every hook has run (Glue#run_deciding).
#
# Everything here runs on the worker thread of the failing job (Thread.current[:kiqd_decider]
# says which job that is); it waits for its `written` in Server#fail_and_await_written.

module KiqdRubyRunner
  # The job being run on this thread with decisions on: its Server and tag, and the exception
  # JobRetry is handling. JobRetry's writes call #write, which answers kiqd and waits.
  class Decider
    def self.current = Thread.current[:kiqd_decider]

    attr_accessor :exception
    attr_reader :wrote

    def initialize(server, tag, glue)
      @server = server
      @tag = tag
      @glue = glue
      @wrote = false
    end

    def write(decision, msg, retry_at = nil)
      body = @glue.error_fields(@exception || RuntimeError.new(msg["error_message"].to_s))
      body["class"] = msg["error_class"] if msg["error_class"].is_a?(String)
      body["message"] = msg["error_message"].to_s if msg.key?("error_message")
      body["decision"] = decision
      body["retry_at"] = retry_at if retry_at
      @server.fail_and_await_written(@tag, JSON.generate(body))
      @wrote = true
    end
  end

  # What JobRetry's process_retry gets for a Redis connection while it files a retry: its ZADD
  # of the retry set goes to the Decider; anything else (an app's sidekiq_retry_in talking to
  # Redis, on 6.x where process_retry uses Sidekiq.redis) goes to a real connection.
  class RetryWrite
    def initialize(decider, real)
      @decider = decider
      @real = real
    end

    def zadd(key, *args, **kw)
      return forward(:zadd, key, *args, **kw) unless key == "retry" && args.size == 2
      score, payload = args
      @decider.write("retry", JSON.parse(payload), score.to_f)
      1
    end

    def method_missing(name, *args, **kw, &block) = forward(name, *args, **kw, &block)
    def respond_to_missing?(*) = true

    private

    def forward(name, *args, **kw, &block)
      @real.call { |conn| conn.public_send(name, *args, **kw, &block) }
    end
  end

  # The application's Sidekiq::JobRetry with its two Redis writes handed to the Decider: the
  # morgue (send_to_morgue, every version) and the retry set (process_retry's `redis` in 7.x/8.x,
  # `Sidekiq.redis` in 6.x's attempt_retry). Everything else is Sidekiq's own code.
  module DecidingRetry
    def send_to_morgue(msg)
      decider = Decider.current or return super
      decider.write("dead", msg)
    end

    def process_retry(*args) # 7.x/8.x
      Decider.current&.exception = args.last
      super
    end

    def attempt_retry(*args) # 6.x
      decider = Decider.current or return super
      decider.exception = args.last
      Thread.current[:kiqd_retry_write] = RetryWrite.new(decider, ->(&b) { Sidekiq.redis_pool.with(&b) })
      super
    ensure
      Thread.current[:kiqd_retry_write] = nil
    end

    def redis(&block) # 7.x/8.x (Sidekiq::Component)
      decider = Decider.current or return super
      block.call(RetryWrite.new(decider, ->(&b) { super(&b) }))
    end
  end

  # 6.x: `Sidekiq.redis` inside attempt_retry.
  module SidekiqRedisForRetry
    def redis(&block)
      (w = Thread.current[:kiqd_retry_write]) ? block.call(w) : super
    end
  end
end
