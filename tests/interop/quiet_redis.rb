# redis-rb for Sidekiq 6.4.1, which predates redis-rb 4.8's deprecations (SADD's boolean reply,
# pipelining on the client object, ...): keeps their warnings out of the output of the suite and
# of the Ruby child processes it starts (write_ruby_script). A child in a world of Sidekiq 7 or
# later (redis-client, no redis-rb in its bundle) has nothing to quiet.
begin
  require "redis"
rescue LoadError
  raise if ENV["KIQD_WORLD"].to_s.empty? # Debian's Ruby: redis-rb is required
else
  Redis.sadd_returns_boolean = false if Redis.respond_to?(:sadd_returns_boolean=)
  Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)
end
