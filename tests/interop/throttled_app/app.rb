# An app that throttles its jobs with sidekiq-throttled (1.5.x on Sidekiq 7.3, 2.x on 8.1), as a
# Rails team writes it; nothing about the limits is restated in kiqd's config. Every job records
# when it ran in `ledger` (jid, scope, start, end), before the gem's middleware finalizes it.
require "sidekiq"
require "sidekiq/throttled"
require "json"
require_relative "../ledger"

Sidekiq.configure_server { |config| config.logger.level = Logger::WARN }

class ConcurrencyJob
  include Sidekiq::Job
  include Sidekiq::Throttled::Job
  sidekiq_throttle concurrency: {limit: 2}

  def perform(_n) = Ledger.record(jid, "concurrency") { sleep 0.3 }
end

class ThresholdJob
  include Sidekiq::Job
  include Sidekiq::Throttled::Job
  sidekiq_throttle threshold: {limit: 5, period: 3}

  def perform(_n) = Ledger.record(jid, "threshold")
end

class TenantJob
  include Sidekiq::Job
  include Sidekiq::Throttled::Job
  sidekiq_throttle concurrency: {limit: 1, key_suffix: ->(tenant, _n) { tenant }}

  def perform(tenant, _n) = Ledger.record(jid, "tenant:#{tenant}") { sleep 0.2 }
end
