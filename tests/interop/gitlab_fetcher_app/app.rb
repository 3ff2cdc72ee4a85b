# An app that sets up gitlab-sidekiq-fetcher's reliable fetch (0.9.0, Sidekiq 6.4), as GitLab
# does. SlowJob records its start and end in `started` / `finished`; it sleeps while the key
# `slow` is set, so that a test can kill the process running it.
require "sidekiq"
require "sidekiq-reliable-fetch"

Sidekiq.configure_server do |config|
  config.logger.level = Logger::WARN
  Sidekiq::ReliableFetch.setup_reliable_fetch!(config)
end

class SlowJob
  include Sidekiq::Worker

  def perform(_n)
    Sidekiq.redis { |r| r.rpush("started", jid) }
    sleep 0.1 while Sidekiq.redis { |r| r.get("slow") }
    Sidekiq.redis { |r| r.rpush("finished", jid) }
  end
end
