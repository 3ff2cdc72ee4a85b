# The benchmark's job: reads one account row (locked, as concurrent jobs may pick the same one)
# and updates it.
class BumpJob < ApplicationJob
  def perform(account_id)
    Account.transaction do
      account = Account.lock.find(account_id)
      account.update!(balance: account.balance + 1)
    end
  end
end
