# Helpers shared by the suites that load the real Sidekiq 7.3.10 next to Debian's 6.4.1
# (test_sidekiq7_interop.rb, test_sidekiq7_suite_interop.rb): where the gems are, Ruby children
# with 7.3 loaded, real 7.3 and 6.4.1 server processes, 7.3's sidekiqmon, and kiqd's
# `compat auto:` log lines. The suite's own Ruby process has 6.4.1 loaded, so everything 7.3
# runs in a child Ruby with ../shared/gems (7.3.10, redis-client 0.26.4, connection_pool 2.5.5)
# ahead of Debian's gems.
require "support"

module KiqdInterop
  module Sidekiq7Helpers
    GEMS = File.expand_path("../shared/gems", KiqdInterop::ROOT)
    SIDEKIQ7 = File.join(GEMS, "sidekiq-7.3.10")
    INCLUDES = %w[sidekiq-7.3.10 redis-client-0.26.4 connection_pool-2.5.5]
               .map { |g| "-I#{File.join(GEMS, g, "lib")}" }.freeze

    def skip_without_sidekiq7
      skip "the real Sidekiq 7.3.10 is not at #{SIDEKIQ7}" unless File.directory?(SIDEKIQ7)
    end

    # Runs `body` in a Ruby with Sidekiq 7.3.10 loaded (pointed at this test's Redis); the last
    # line it prints is JSON, returned parsed.
    def sidekiq7_json(name, body, *args)
      script = File.join(tmpdir, name)
      File.write(script, <<~RUBY + body)
        require "json"
        require "sidekiq"
        require "sidekiq/api"
        raise "loaded Sidekiq \#{Sidekiq::VERSION}, not 7.3.10" unless Sidekiq::VERSION == "7.3.10"
        Sidekiq.configure_client { |c| c.redis = { url: ENV.fetch("REDIS_URL") } }
      RUBY
      out = IO.popen({ "REDIS_URL" => redis_url }, [KiqdInterop::RUBY, *INCLUDES, script, *args],
                     err: [:child, :out], &:read)
      assert $?.success?, "#{name} failed:\n#{out}"
      JSON.parse(out.lines.last)
    end

    # A real Sidekiq server process, 7.3.10 (version 7) or Debian's 6.4.1 (version 6), loading
    # `jobfile` and serving `queues`; returns it once it is in `processes`.
    def spawn_sidekiq_server(version, jobfile, queues, concurrency: 1)
      flags = ["-r", jobfile, "-c", concurrency.to_s, *queues.flat_map { |q| ["-q", q] }, "-t", "2"]
      child =
        if version == 7
          spawn_child("sidekiq-7.3", [KiqdInterop::RUBY, *INCLUDES,
                                      File.join(SIDEKIQ7, "bin", "sidekiq"), *flags])
        else
          spawn_child("sidekiq-6.4", KiqdInterop.sidekiq_command("sidekiq") + flags)
        end
      label = version == 7 ? "Sidekiq 7.3" : "Sidekiq 6.4.1"
      wait_until(30, "#{label} in `processes`") do
        assert_alive(child)
        redis.smembers("processes").any? { |id| id.split(":")[-2] == child.pid.to_s }
      end
      child
    end

    # 7.3's sidekiqmon output for this test's Redis.
    def sidekiqmon7
      script = File.join(tmpdir, "mon7.rb")
      File.write(script, "require 'sidekiq/monitor'\nSidekiq::Monitor::Status.new.display\n")
      IO.popen({ "REDIS_URL" => redis_url }, [KiqdInterop::RUBY, *INCLUDES, script],
               err: [:child, :out], &:read)
    end

    def decision_lines(kiqd)
      kiqd.log.lines.grep(/compat auto: /).map { |l| l[/compat auto: .*/] }
    end

    def wait_for_decision(kiqd, text, timeout = 25)
      wait_until(timeout, "kiqd to log #{text.inspect}") { decision_lines(kiqd).last&.include?(text) }
    end
  end
end
