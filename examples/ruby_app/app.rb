# A tiny Sidekiq application: the job classes a Rails app keeps in app/jobs, in one plain Ruby
# file. kiqd runs them through kiqd-ruby-runner (kiqd.yml next to this file); enqueue them from
# Ruby as usual:
#
#   ruby -r ./examples/ruby_app/app.rb -e 'HardJob.perform_async("bob", 5)'
#
# Sidekiq connects to $REDIS_URL (else redis://localhost:6379/0), in this file's clients and in
# the runner's processes, which get kiqd's environment. Debian 12's ruby-sidekiq (6.4.1) is all
# it needs; Sidekiq 7 and 8 run it unchanged.
require "digest"
require "json"
require "sidekiq"

# redis-rb 4.8, beside Sidekiq 6.4, warns about every SADD Sidekiq sends.
Redis.silence_deprecations = true if defined?(Redis) && Redis.respond_to?(:silence_deprecations=)

module RubyApp
  # Each job leaves a result here: proof of where it ran (read by scripts/demo).
  RESULTS = "ruby_app:results"

  def self.record(jid, result)
    here = {pid: Process.pid, ppid: Process.ppid, ruby: RUBY_VERSION, sidekiq: Sidekiq::VERSION}
    Sidekiq.redis { |r| r.hset(RESULTS, jid, JSON.generate(result.merge(here))) }
  end
end

class HardJob
  include Sidekiq::Job # Sidekiq 6.3 and later; Sidekiq::Worker, the older name, works too

  def perform(name, count)
    digest = name
    count.times { digest = Digest::SHA256.hexdigest(digest) } # stands in for real work
    Sidekiq.logger.info "#{name}: #{count} rounds of SHA-256 -> #{digest[0, 12]} in Ruby #{RUBY_VERSION}, pid #{Process.pid}"
    RubyApp.record(jid, {class: "HardJob", name: name, digest: digest})
  end
end

# Fails on its first attempt. The retry is Sidekiq's own: the runner hands the exception to this
# app's Sidekiq::JobRetry, which asks sidekiq_retry_in, and kiqd writes the retry it decided.
class FlakyJob
  include Sidekiq::Job
  sidekiq_options queue: "critical", retry: 3
  sidekiq_retry_in { |_count, _exception| 1 } # seconds, plus Sidekiq's jitter (default: 15 s and up)

  def perform(order)
    attempt = Sidekiq.redis { |r| r.hincrby("ruby_app:attempts", jid, 1) }
    raise IOError, "payment gateway timed out (attempt #{attempt})" if attempt == 1
    Sidekiq.logger.info "order #{order} charged on attempt #{attempt}"
    RubyApp.record(jid, {class: "FlakyJob", order: order, attempt: attempt})
  end
end
