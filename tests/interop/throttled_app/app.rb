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

# The threshold's admissions as the gem makes them: the `now` its script was given, recorded when
# the script admits a job. A job starts some time after its admission (its thread has to get the
# CPU and Ruby's lock first; longer on a loaded machine), so the jobs' own start times can bunch
# closer together than the admissions the limit is about. Test instrumentation only: the gem
# decides exactly as without it.
module ThresholdAdmissions
  def call(redis, keys: [], argv: [])
    result = super
    redis.call("RPUSH", "threshold_admissions", argv[2].to_s) if result == 0
    result
  end
end
Sidekiq::Throttled::Strategy::Threshold.const_get(:SCRIPT).singleton_class.prepend(ThresholdAdmissions)
