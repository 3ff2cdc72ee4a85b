# A minimal Rails application whose ActiveJob jobs go through Sidekiq's adapter: Rails 6.1
# (Debian's ruby-rails), 7.2 (the sidekiq73 test world) or 8.1 (sidekiq81), each with its own
# defaults. kiqd runs them with `kiqd-ruby-runner --require <this directory>` (its
# config/environment.rb). tests/integration/runner_test.cpp enqueues with perform_later.
require "rails"
require "active_job/railtie"
require "sidekiq"

Redis.silence_deprecations = true if defined?(Redis) && Redis.respond_to?(:silence_deprecations=)

module RailsApp
  class Application < Rails::Application
    config.root = File.expand_path("..", __dir__) # (no config.ru to find it from)
    config.load_defaults Rails::VERSION::STRING.to_f
    config.eager_load = false
    config.secret_key_base = "kiqd-test-application-not-a-secret" # (else Rails writes tmp/)
    config.logger = Logger.new($stdout)
    config.log_level = :info
    config.active_job.queue_adapter = :sidekiq
  end
end

redis = {url: ENV.fetch("APP_REDIS_URL")}
Sidekiq.configure_client { |c| c.redis = redis }
Sidekiq.configure_server { |c| c.redis = redis }
