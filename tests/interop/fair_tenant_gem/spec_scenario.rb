# sidekiq-fair_tenant 0.1.0's own spec scenario (spec/sidekiq/fair_tenant_spec.rb), replayed with
# the gem's real client middleware and its spec's job classes (jobs.rb beside this file) against a
# real Redis (not Sidekiq::Testing), for test_fair_tenant_gem_interop.rb. Prints one JSON line
# per push:
# {"example", "jid", "queue"} (the queue the gem chose, read by a client middleware placed after
# it), then {"done": true}. Time travel (ActiveSupport's `travel`) moves the gem's Time.now, as
# in the spec; the window keys are cleared between examples, as the spec's after hook does.
# Runs in a world (scripts/world: the gem, its anyway_config and ActiveSupport from the bundle).
# Env: REDIS_URL; FAIR_TENANT_ACTIVE_JOB=1 loads ActiveJob and replays the spec's ActiveJob
# examples too (both worlds have ActiveJob: 6.1 in sidekiq64, 7.2 in sidekiq73).
require "json"
require "logger"
require_relative "../quiet_redis" # redis-rb (Sidekiq 6.4.1's client) quietly, as the suite loads it
require "forwardable" # the gem uses Forwardable without requiring it (bundler loads it in its spec)
# The gem expects an app's ActiveSupport core extensions (blank?, symbolize_keys, constantize).
require "active_support/all"
require "active_support/testing/time_helpers"
require "sidekiq"
# Before Rails: anyway_config reads its settings from a Rails app's config/ when Rails is loaded
# as it loads, and this scenario has no app.
require "sidekiq/fair_tenant"
ACTIVE_JOB = ENV["FAIR_TENANT_ACTIVE_JOB"] == "1"
if ACTIVE_JOB
  require "active_job"
  # Sidekiq 7's own ActiveJob adapter wraps jobs in Sidekiq::ActiveJob::Wrapper, defined with its
  # Rails engine (sidekiq/rails, which an app loads with Rails); 6.x's is ActiveJob's own.
  if Sidekiq::VERSION.to_i >= 7
    require "rails"
    require "sidekiq/rails"
  end
  require "active_job/queue_adapters/sidekiq_adapter"
end
require_relative "jobs"

include ActiveSupport::Testing::TimeHelpers

ActiveJob::Base.logger = Logger.new(nil) if ACTIVE_JOB
Sidekiq.logger.level = Logger::WARN

# Records the queue each job leaves the client chain with (after the gem's middleware).
class QueueRecorder
  class << self
    attr_accessor :last
  end

  def call(_worker, job, queue, _redis_pool)
    self.class.last = job["queue"] || queue
    yield
  end
end

Sidekiq.configure_client do |config|
  config.redis = { url: ENV.fetch("REDIS_URL") }
  config.client_middleware { |chain| chain.add QueueRecorder }
end

$stdout.sync = true

def record(example)
  QueueRecorder.last = nil
  jid = yield
  puts({ example: example, jid: jid.is_a?(String) ? jid : jid.provider_job_id,
         queue: QueueRecorder.last }.to_json)
end

def after_example
  travel_back
  Sidekiq.redis do |redis|
    keys = redis.keys("sidekiq-fair_tenant:*")
    redis.del(*keys) unless keys.empty?
  end
end

record("plain") { SamplePlainJob.perform_async }
after_example

throttled = ->(**args) { SampleThrottledJob.set(**args).perform_async }
record("throttled foo 1") { throttled.call(fair_tenant: :foo) }
record("throttled foo 2") { throttled.call(fair_tenant: :foo) }
record("throttled bar") { throttled.call(fair_tenant: :bar) }
travel 1.hour + 1.second
record("throttled foo after 1 h") { throttled.call(fair_tenant: :foo) }
travel 1.day + 1.second
record("throttled foo after 1 d") { throttled.call(fair_tenant: :foo) }
after_example

2.times do |i|
  record("explicit queue #{i + 1}") do
    SampleThrottledJob.set(queue: :another, fair_tenant: :foo).perform_async
  end
end
after_example

if ACTIVE_JOB
  active = ->(*args) { SampleActiveJob.perform_later(*args) }
  record("active job 1") { active.call }
  record("active job 2") { active.call }
  record("active job bar") { active.call("bar") }
  travel 1.hour + 1.second
  record("active job after 1 h") { active.call }
  travel 1.day + 1.second
  record("active job after 1 d") { active.call }
  after_example

  2.times do |i|
    record("active job explicit queue #{i + 1}") { SampleActiveJob.set(queue: :another).perform_later }
  end
  after_example
end

puts({ done: true }.to_json)
