# The scenario application of the runner differential suite (test_runner_differential_interop.rb):
# loaded by the real Sidekiq server (`sidekiq -r`) and by kiqd-ruby-runner under kiqd, on the
# same Sidekiq (a test world). It leans on what Sidekiq's server does in Ruby: a setting made in
# configure_server (max_retries), lifecycle events, server middleware, error and death handlers,
# sidekiq_retry_in (seconds, :kill, :discard, raising), sidekiq_retries_exhausted (seeing the real
# exception object, its attributes and cause; returning :discard), retry: false and dead: false.
# Everything it sees goes to Redis lists (diff:<name>), which the suite compares between the two
# servers along with the retry and dead sets.
require "json"
require "sidekiq"
require "sidekiq/api"
if defined?(Redis) # redis-rb 4.8 (Sidekiq 6.4) warns about Sidekiq's own calls
  Redis.sadd_returns_boolean = false if Redis.respond_to?(:sadd_returns_boolean=)
  Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)
end

module Diff
  MAJOR = Sidekiq::VERSION.to_i

  def self.record(list, value)
    Sidekiq.redis { |r| r.rpush("diff:#{list}", JSON.generate(value)) }
  end

  # Runs around every job, on both servers.
  class Middleware
    def call(_instance, job, _queue)
      yield
    ensure
      Diff.record("middleware", [job["jid"], $!&.class&.name])
    end
  end
end

Sidekiq.configure_server do |config|
  config.logger.level = Logger::WARN
  # A setting made in Ruby, not in sidekiq.yml.
  if Diff::MAJOR >= 7
    config[:max_retries] = 3
  else
    Sidekiq.options[:max_retries] = 3
  end
  events = Diff::MAJOR >= 7 ? config[:lifecycle_events] : Sidekiq.options[:lifecycle_events]
  events.each_key { |event| config.on(event) { Diff.record("events", event.to_s) } }
  config.server_middleware { |chain| chain.add Diff::Middleware }
  config.error_handlers << ->(ex, ctx, *) { Diff.record("errors", [ex.class.name, ex.message, ctx[:job]&.fetch("jid", nil)]) }
  config.death_handlers << ->(job, ex) { Diff.record("deaths", [job["jid"], ex.class.name, job["error_class"]]) }
end

# An API client's error: built from a response, not from a message.
class ApiError < StandardError
  attr_reader :status

  def initialize(response)
    @status = response.fetch(:status)
    super("the API answered #{@status}")
  end
end

class OkJob
  include Sidekiq::Job
  def perform(n) = Diff.record("ok", [jid, n])
end

class RetryInJob
  include Sidekiq::Job
  sidekiq_retry_in { |count, _ex| 42 + count }
  def perform = raise("retry me")
end

# Its last retry (the payload carries retry_count 2; max_retries is 3): the exhausted block sees
# the ApiError itself, with its status and its cause.
class ExhaustJob
  include Sidekiq::Job
  sidekiq_retry_in { |_count, _ex| raise "sidekiq_retry_in must not run on the last failure" }
  sidekiq_retries_exhausted do |msg, ex|
    Diff.record("exhausted", [msg["jid"], ex.class.name, ex.respond_to?(:status) ? ex.status : nil,
                              ex.cause&.class&.name, Sidekiq::DeadSet.new.size])
  end

  def perform
    begin
      raise KeyError, "no such account"
    rescue KeyError
      raise ApiError.new(status: 503)
    end
  end
end

class RaisingRetryInJob
  include Sidekiq::Job
  sidekiq_retry_in { |_count, _ex| raise ArgumentError, "sidekiq_retry_in broke" }
  def perform = raise("default delay")
end

class KillJob
  include Sidekiq::Job
  sidekiq_retry_in { |_count, _ex| :kill }
  sidekiq_retries_exhausted { |msg, ex| Diff.record("exhausted", [msg["jid"], ex.class.name, nil, nil, nil]) }
  def perform = raise(IOError, "kill me")
end

class DiscardJob
  include Sidekiq::Job
  sidekiq_retry_in { |_count, _ex| :discard }
  def perform = raise(IOError, "discard me")
end

class ExhaustedDiscardJob
  include Sidekiq::Job
  sidekiq_options retry: 0
  sidekiq_retries_exhausted { |msg, _ex| Diff.record("exhausted", [msg["jid"], "discarding", nil, nil, nil]) && :discard }
  def perform = raise(IOError, "exhausted, then discarded")
end

class NoRetryJob
  include Sidekiq::Job
  sidekiq_options retry: false
  def perform = raise(IOError, "no retries")
end

class NotDeadJob
  include Sidekiq::Job
  sidekiq_options retry: 0, dead: false
  def perform = raise(IOError, "not to the dead set")
end
