# Enqueues jobs the way the application does (perform_async / perform_later), with Sidekiq's own
# client. Usage: ruby enqueue.rb '[["PlainJob", 1, "two"], ["GreetJob", "Ada"]]'
require_relative "app"

JSON.parse(ARGV.fetch(0)).each do |klass, *args|
  k = Object.const_get(klass)
  if k < ActiveJob::Base
    puts "jid: #{k.perform_later(*args).provider_job_id}"
  else
    puts "jid: #{k.perform_async(*args)}"
  end
end
