# The application the runner library's unit tests boot in-process (support.rb), with whichever
# Sidekiq the Ruby loads. Its jobs record what they did in UnitApp's lists (this process's
# memory) and wait at gates the test opens; it declares, in Ruby, what the runner reports in
# `ready`: retry and dead-set settings, capsules (Sidekiq 7 and later), job classes with queues
# and GitLab-style worker attributes, and a module prepended to Sidekiq's fetch.
require "sidekiq"
require "sidekiq/api"
if defined?(Redis) # redis-rb 4.8 (Sidekiq 6.4.1) warns about Sidekiq's SADD and pipelining
  Redis.sadd_returns_boolean = false if Redis.respond_to?(:sadd_returns_boolean=)
  Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)
end

module UnitApp
  LOCK = Mutex.new
  LISTS = Hash.new { |h, k| h[k] = [] }
  GATES = Hash.new { |h, k| h[k] = Queue.new }

  def self.record(list, value) = LOCK.synchronize { LISTS[list] << value }
  def self.records(list) = LOCK.synchronize { LISTS[list].dup }
  def self.clear = LOCK.synchronize { LISTS.clear }

  # Blocks the job until the test opens this gate.
  def self.gate(name) = LOCK.synchronize { GATES[name] }.pop
  def self.release(name) = LOCK.synchronize { GATES[name] } << true
end

Sidekiq.configure_server do |config|
  config.logger.level = Logger::WARN
  settings = Sidekiq::VERSION.to_i >= 7 ? config : Sidekiq.options
  settings[:max_retries] = 7
  settings[:dead_max_jobs] = 500 # dead_timeout_in_seconds stays Sidekiq's default
  if Sidekiq::VERSION.to_i >= 7
    config.capsule("unit_single") do |cap|
      cap.concurrency = 1
      cap.queues = %w[unit_single]
    end
    config.capsule("unit_weighted") do |cap|
      cap.concurrency = 2
      cap.queues = ["unit_a,3", "unit_b,1"]
    end
  end
  config.death_handlers << ->(job, ex) { UnitApp.record(:deaths, [job["jid"], ex.class.name]) }
  config.error_handlers << ->(ex, ctx, *) { UnitApp.record(:errors, [ex.class.name, ctx[:job]&.fetch("jid", nil)]) }
end

# Stands for a gem that changes Sidekiq's fetch; this file is no gem's, so it is reported with
# an empty gem name.
module UnitFetchPatch
  def retrieve_work = super
end
Sidekiq::BasicFetch.prepend(UnitFetchPatch)

# The class methods GitLab's WorkerAttributes concern adds, in a few lines.
module UnitWorkerAttributes
  def self.included(base) = base.extend(ClassMethods)

  module ClassMethods
    def urgency(value) = (@urgency = value)
    def get_urgency = @urgency || :low
    def get_worker_resource_boundary = :cpu
    def get_feature_category = :search
    def idempotent? = true
    def worker_has_external_dependencies? = false
    def get_tags = [:search, "pdf"]
  end
end

# Waits at its gate; records the thread it ran on.
class UnitGateJob
  include Sidekiq::Worker

  def perform(key)
    UnitApp.record(:started, [key, Thread.current.object_id])
    UnitApp.gate(key)
    UnitApp.record(:finished, key)
  end
end

class UnitNoopJob
  include Sidekiq::Worker

  def perform(*) = nil
end

class UnitQueuedJob
  include Sidekiq::Worker
  sidekiq_options queue: "unit_single"

  def perform = nil
end

class UnitSearchJob
  include Sidekiq::Worker
  include UnitWorkerAttributes
  sidekiq_options queue: "unit_search"
  urgency :high

  def perform = nil
end

# Worker attributes that raise: the class says nothing, the others are still reported.
class UnitBrokenAttributesJob
  include Sidekiq::Worker
  sidekiq_options queue: "unit_broken"

  def self.get_urgency = raise("no urgency today")
end

class UnitFailError < StandardError; end

class UnitFailJob
  include Sidekiq::Worker
  sidekiq_retry_in { |count, *| 100 * (count + 1) }
  sidekiq_retries_exhausted { |job, ex| UnitApp.record(:exhausted, [job["jid"], ex.class.name, ex.message]) }

  def perform(message) = raise(UnitFailError, message)
end

# Enqueues through Sidekiq.redis from its worker thread (7.x/8.x: the capsule's pool).
class UnitEnqueueJob
  include Sidekiq::Worker

  def perform(n) = UnitQueuedJob.set(queue: "unit_enqueued").perform_async(n)
end

# Records whether its iteration context says stop (Sidekiq 7.x/8.x give each instance one).
class UnitStoppingJob
  include Sidekiq::Worker

  def perform(key)
    UnitApp.record(:started, [key, Thread.current.object_id])
    UnitApp.gate(key)
    UnitApp.record(:stopping, respond_to?(:_context) && _context ? _context.stopping? : nil)
  end
end
