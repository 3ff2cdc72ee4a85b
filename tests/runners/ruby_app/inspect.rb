# Prints what Sidekiq's own API (the Web UI's data) shows of the retry and dead sets, as JSON.
require_relative "app"
require "sidekiq/api"

def entries(set)
  set.map do |e|
    {"class" => e.klass, "display_class" => e.display_class, "jid" => e.jid,
     "error_class" => e["error_class"], "error_message" => e["error_message"],
     "error_backtrace" => e.error_backtrace, "at" => e.at.to_f, "retry_count" => e["retry_count"]}
  end
end

puts JSON.generate({"retry" => entries(Sidekiq::RetrySet.new), "dead" => entries(Sidekiq::DeadSet.new)})
