# A native Sidekiq job (Sidekiq::Worker, as apps written for 6.x say it) that credits an account.
class LedgerWorker
  include Sidekiq::Worker
  sidekiq_options queue: "default"

  def perform(account_id, job_key)
    Account.credit!(account_id, 1, job_key: job_key, job_class: self.class.name)
  end
end
