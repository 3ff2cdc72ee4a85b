class Account < ApplicationRecord
  has_many :ledger_entries

  # Adds `amount` to the balance and writes the ledger row of the job `job_key`, in one
  # transaction with the account's row locked (concurrent jobs on one account serialize here).
  # The block, if any, runs inside the transaction: an exception it raises rolls both back.
  def self.credit!(id, amount, job_key:, job_class:, attempt: 1)
    transaction do
      account = lock.find(id)
      account.update!(balance: account.balance + amount)
      account.ledger_entries.create!(job_key: job_key, job_class: job_class, amount: amount,
                                     attempt: attempt, pid: Process.pid)
      yield if block_given?
    end
  end
end
