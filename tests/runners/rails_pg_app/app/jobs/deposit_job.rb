# An ActiveJob (Sidekiq's adapter) that credits an account: one ledger row per run.
class DepositJob < ApplicationJob
  def perform(account_id, job_key)
    Account.credit!(account_id, 1, job_key: job_key, job_class: self.class.name)
  end
end
