# The job classes of sidekiq-fair_tenant 0.1.0's spec scenario (its spec/support/jobs.rb, which
# the gem as published on RubyGems does not ship), written out here with the same names and
# rules: a plain job, a Sidekiq job with two throttling rules (1 job per day → whatever_semislow,
# 1 per hour → whatever_supaslow), and, where the world has ActiveJob, an ActiveJob job with the
# same rules whose tenant is its first argument ("foo" by default).
class SamplePlainJob
  include Sidekiq::Worker

  def perform(*); end
end

RULES = [
  { queue: :whatever_semislow, threshold: 1, per: 1.day },
  { queue: :whatever_supaslow, threshold: 1, per: 1.hour },
].freeze

class SampleThrottledJob
  include Sidekiq::Worker

  sidekiq_options queue: :whatever, fair_tenant_queues: RULES
end

if defined?(ActiveJob)
  class SampleActiveJob < ActiveJob::Base
    self.queue_adapter = :sidekiq
    queue_as :whatever

    # ActiveJob classes take sidekiq_options through Sidekiq::Worker::Options (Sidekiq >= 6.0.1).
    include Sidekiq::Worker::Options
    sidekiq_options fair_tenant_queues: RULES

    def self.fair_tenant(tenant = "foo", *) = tenant

    def perform(*); end
  end
end
