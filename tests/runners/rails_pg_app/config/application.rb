# A minimal Rails application on PostgreSQL: Active Record models, ActiveJob jobs on Sidekiq's
# adapter (app/jobs) and native Sidekiq job classes (app/workers). One app for every Rails it is
# tested on, each with its own defaults: 6.1 (Debian's ruby-rails and ruby-pg, Sidekiq 6.4.1),
# 7.2 (the sidekiq73 test world, Sidekiq 7.3) and 8.1 (sidekiq81, Sidekiq 8.1). kiqd runs its
# jobs with `kiqd-ruby-runner --require <this directory>`; Sidekiq with `sidekiq -r <this
# directory>`. tests/interop/test_rails_pg_interop.rb and bench/runners.sh's Rails row use it.
# The database comes from DATABASE_HOST/DATABASE_PORT/DATABASE_NAME (config/database.yml);
# Redis, as for any Sidekiq app, from REDIS_URL.
require "rails"
require "active_record/railtie"
require "active_job/railtie"
require "sidekiq"

Redis.silence_deprecations = true if defined?(Redis) && Redis.respond_to?(:silence_deprecations=)

module RailsPgApp
  class Application < Rails::Application
    config.root = File.expand_path("..", __dir__) # (no config.ru to find it from)
    config.load_defaults Rails::VERSION::STRING.to_f
    # As in production: every class is loaded at boot, so a preloading master forks with the
    # whole application loaded, and job threads never autoload.
    config.eager_load = true
    config.secret_key_base = "kiqd-test-application-not-a-secret" # (else Rails writes tmp/)
    config.logger = Logger.new($stdout)
    config.log_level = ENV.fetch("APP_LOG_LEVEL", "info").to_sym
    config.active_job.queue_adapter = :sidekiq
  end
end

# APP_LOG_LEVEL=warn (the benchmark) also keeps Sidekiq's per-job lines out: a level set here does
# not survive Sidekiq's CLI boot, one set in configure_server does.
Sidekiq.configure_server do |config|
  config.logger.level = Logger.const_get(ENV["APP_LOG_LEVEL"].upcase) if ENV["APP_LOG_LEVEL"]
end
