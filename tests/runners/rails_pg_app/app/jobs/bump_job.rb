# The benchmark's job: reads one account row and updates it.
class BumpJob < ApplicationJob
  def perform(account_id)
    account = Account.find(account_id)
    account.update!(balance: account.balance + 1)
  end
end
