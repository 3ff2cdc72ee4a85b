# A small Sidekiq application for tests/runners/runner_protocol_test.rb, loaded by
# kiqd-ruby-runner with whichever Sidekiq the Ruby loads (Debian's 6.4.1, or the 7.3 or 8.1 of a
# test world, scripts/world). It configures no Redis: Sidekiq takes REDIS_URL from the
# environment, as it does under `sidekiq`. Jobs record what they did in Redis lists (app:<name>)
# and wait at gates: a FIFO under $APP_GATES that the test opens and closes to let one job on.
require "json"
require "sidekiq"
require "sidekiq/api"
if defined?(Redis) # redis-rb 4.8 (Sidekiq 6.4.1) warns about Sidekiq's SADD and pipelining
  Redis.sadd_returns_boolean = false if Redis.respond_to?(:sadd_returns_boolean=)
  Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)
end
Sidekiq.configure_server { |c| c.logger.level = Logger::WARN }
require "sidekiq/rails" if Sidekiq::VERSION.to_i >= 7 # 7.x's ActiveJob adapter wraps jobs in its class
require "active_job"
require "active_job/queue_adapters/sidekiq_adapter"
ActiveJob::Base.queue_adapter = :sidekiq
ActiveJob::Base.logger = Logger.new(nil)

module App
  def self.record(list, value)
    Sidekiq.redis { |r| r.rpush("app:#{list}", JSON.generate(value)) }
  end

  # Blocks (without holding Ruby's lock) until the test opens this gate's FIFO for writing.
  def self.gate(name)
    File.read(File.join(ENV.fetch("APP_GATES"), name))
  end
end

# Sees every job the runner runs, inside the job's logging context; lets no SkippedJob through.
class RecordMiddleware
  def call(_instance, job, queue)
    App.record("middleware", [job["class"], job["jid"], queue, Thread.current[:sidekiq_context]&.fetch(:jid, nil)])
    raise Sidekiq::JobRetry::Skip if job["class"] == "SkippedJob"
    yield
  end
end

# Every lifecycle event the version knows, recorded with the process that fired it and the
# Sidekiq major version.
Sidekiq.configure_server do |c|
  events = Sidekiq::VERSION.to_i >= 7 ? c[:lifecycle_events] : Sidekiq.options[:lifecycle_events]
  events.each_key do |event|
    c.on(event) { App.record("events", [event.to_s, Process.pid, Sidekiq::VERSION.to_i]) }
  end
end

Sidekiq.configure_server do |c|
  c.server_middleware { |chain| chain.add RecordMiddleware }
  c.death_handlers << ->(job, ex) { App.record("deaths", [job["class"], job["jid"], ex.class.name, ex.message]) }
  c.error_handlers << ->(ex, ctx, *) { App.record("errors", [ex.class.name, ctx[:job]&.fetch("jid", nil)]) }
end

class GateJob
  include Sidekiq::Job

  def perform(key)
    App.record("started", [key, jid, Thread.current.object_id])
    App.gate(key)
    App.record("finished", [key, jid])
  end
end

# Sleeps until SIGTERM's Sidekiq::Shutdown; its ensure block records that it ran.
class SleepJob
  include Sidekiq::Worker

  def perform(key)
    App.record("started", [key, jid, Thread.current.object_id])
    sleep 60
  ensure
    App.record("ensure", [key, $!&.class&.name])
  end
end

class ModeError < StandardError; end

# Fails; sidekiq_retry_in answers by the message: "kill", "discard", or 100 s per retry.
class FailJob
  include Sidekiq::Job
  sidekiq_options retry: 5
  sidekiq_retry_in do |count, ex, msg|
    App.record("retry_in", [count, ex.class.name, msg && msg["error_class"]])
    raise "sidekiq_retry_in broke" if ex.message == "bad-retry-in"
    {"kill" => :kill, "discard" => :discard}.fetch(ex.message) { 100 * (count + 1) }
  end
  # Sees the real exception object; "keep-out" asks for the job to be discarded.
  sidekiq_retries_exhausted do |msg, ex|
    App.record("exhausted", [msg["jid"], ex.class.name, ex.message, Sidekiq::DeadSet.new.size])
    :discard if ex.message == "keep-out"
  end

  def perform(mode)
    check(mode)
  end

  def check(mode)
    raise ModeError, mode
  end
end

class ExhaustedJob
  include Sidekiq::Job
  sidekiq_options retry: 2
  sidekiq_retries_exhausted { |msg, ex| App.record("exhausted", [msg["jid"], ex.class.name, ex.message]) }
end

class NoRetryJob
  include Sidekiq::Job
  sidekiq_options retry: false
  sidekiq_retries_exhausted { |msg, _ex| App.record("exhausted", [msg["jid"], "must not run"]) }
  def perform = raise(ArgumentError, "no")
end

# An exception whose constructor takes a response, not a message (as API clients' errors do).
class ApiError < StandardError
  attr_reader :status

  def initialize(response)
    @status = response.fetch(:status)
    super("the API answered #{@status}")
  end
end

class ApiJob
  include Sidekiq::Job
  sidekiq_retries_exhausted { |msg, ex| App.record("exhausted", [msg["jid"], ex.class.name, ex.message]) }
  def perform = raise(ApiError.new(status: 503))
end

# An exception whose message cannot be read.
class UnreadableError < StandardError
  def message = raise(NotImplementedError, "no message")
end

class UnreadableJob
  include Sidekiq::Job
  def perform = raise(UnreadableError)
end

class OtherJob
  include Sidekiq::Job
  def perform(_n); end
end

# Enqueues a job and talks to Redis itself, through REDIS_URL.
class EnqueueJob
  include Sidekiq::Job

  def perform(n)
    OtherJob.perform_async(n)
    Sidekiq.redis { |r| r.incr("app:enqueue_calls") }
  end
end

class SkippedJob
  include Sidekiq::Job
  def perform = App.record("started", ["skipped", jid, 0])
end

class GreetJob < ActiveJob::Base
  def perform(name)
    App.record("greeted", [name, job_id, provider_job_id])
  end
end

if defined?(Sidekiq::IterableJob)
  # Walks 0..4. At item 1 it waits at the gate "<key>-1" (the test sends `quiet` meanwhile),
  # then up to 10 s for the runner to have read the `quiet` (Sidekiq's interrupted?).
  class WalkJob
    include Sidekiq::IterableJob

    def build_enumerator(key, cursor:)
      array_enumerator((0..4).to_a, cursor: cursor)
    end

    def each_iteration(item, key)
      App.record("walked", [key, item, jid])
      return unless item == 1 && !interrupted?
      App.gate("#{key}-1")
      deadline = ::Process.clock_gettime(::Process::CLOCK_MONOTONIC) + 10
      sleep 0.01 until interrupted? || ::Process.clock_gettime(::Process::CLOCK_MONOTONIC) > deadline
    end
  end
end
