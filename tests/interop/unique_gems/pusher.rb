# The pusher of the sidekiq-unique-jobs interop suite: one JSON request per line on stdin, one
# JSON reply per line on stdout, so a test can push with the gem's real client middleware (on
# either gem line) step by step.
#   {"op":"push","class":"Test::Gated::UntilExecuted","args":[...]} → {"jid": jid or null}
#   {"op":"digests"}  → {"digests": [...]}  SidekiqUniqueJobs::Digests' entries
#   {"op":"reap"}     → {"reaped": n}       one pass of the gem's orphan reaper (Ruby)
require "json"
require_relative "app"

Sidekiq.configure_client { |c| c.redis = { url: ENV.fetch("REDIS_URL") } }
$stdout.sync = true
puts({ ready: Sidekiq::VERSION, gem: SidekiqUniqueJobs::VERSION }.to_json)
$stdin.each_line do |line|
  req = JSON.parse(line)
  reply =
    case req["op"]
    when "push"
      klass = Object.const_get(req["class"])
      { jid: klass.set(req["options"] || {}).perform_async(*req["args"]) }
    when "digests"
      { digests: SidekiqUniqueJobs::Digests.new.entries.keys }
    when "reap"
      orphans = Sidekiq.redis { |conn| SidekiqUniqueJobs::Orphans::RubyReaper.new(conn).orphans }
      Sidekiq.redis { |conn| SidekiqUniqueJobs::Orphans::RubyReaper.new(conn).call }
      { reaped: orphans.size, orphans: orphans }
    else
      { error: "unknown op #{req["op"]}" }
    end
  puts reply.to_json
rescue StandardError => e
  puts({ error: "#{e.class}: #{e.message}" }.to_json)
end
