# An ActiveJob that enqueues two more jobs from inside `perform`, one ActiveJob and one native
# Sidekiq job, through the app's own Sidekiq client (REDIS_URL): the children write the ledger
# rows "<key>/active_job" and "<key>/sidekiq".
class FanOutJob < ApplicationJob
  def perform(account_id, job_key)
    Account.credit!(account_id, 1, job_key: job_key, job_class: self.class.name)
    DepositJob.perform_later(account_id, "#{job_key}/active_job")
    LedgerWorker.perform_async(account_id, "#{job_key}/sidekiq")
  end
end
