class LedgerEntry < ApplicationRecord
  belongs_to :account
end
