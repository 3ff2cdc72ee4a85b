# ACCOUNTS accounts (default 10) with a zero balance.
Integer(ENV.fetch("ACCOUNTS", "10")).times do |i|
  Account.create!(name: "account #{i}")
end
