# A native Sidekiq job (Sidekiq::Job, as apps written for 7.x say it) whose first attempt fails
# inside its transaction: the credit and the ledger row of attempt 1 roll back; the retry (after
# about a second: sidekiq_retry_in) commits them. Each attempt is recorded outside the
# transaction first.
class FlakyWorker
  include Sidekiq::Job
  sidekiq_options queue: "default", retry: 3
  sidekiq_retry_in { 1 }

  def perform(account_id, job_key)
    attempt = Attempt.transaction do
      Attempt.create!(job_key: job_key, pid: Process.pid)
      Attempt.where(job_key: job_key).count
    end
    Account.credit!(account_id, 100, job_key: job_key, job_class: self.class.name, attempt: attempt) do
      raise "#{job_key}: attempt #{attempt} fails on purpose" if attempt == 1
    end
  end
end
