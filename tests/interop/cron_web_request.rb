# Loaded by the cron interop tests' child Rubies: Sidekiq's Web UI with sidekiq-cron's tab (of
# whichever gem version the child loaded), behind a session as Sidekiq::Web needs, as a
# Rack::MockRequest — the pages are rendered without a web server.
require "securerandom"
require "rack"
require "rack/session/cookie"
require "sidekiq/web"
require "sidekiq/cron/web"

def cron_web
  app = Rack::Builder.new do
    use Rack::Session::Cookie, secret: SecureRandom.hex(64), same_site: true
    run Sidekiq::Web
  end
  Rack::MockRequest.new(app)
end
