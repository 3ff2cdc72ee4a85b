# Helpers shared by the files that check kiqd with the real Sidekiq 7.3 and 8.1 next to Debian's
# 6.4.1 (test_sidekiq7_interop.rb, test_sidekiq7_suite_interop.rb, test_capsules7_interop.rb):
# Ruby children with the world's Sidekiq loaded, real server processes of the world's Sidekiq
# and of Debian's 6.4.1, the world's sidekiqmon, and kiqd's `compat auto:` log lines. Those files
# run once per world (KiqdInterop::Worlds.per_world): sidekiq73 (Sidekiq 7.3.10, Ruby 3.1) and
# sidekiq81 (Sidekiq 8.1.7, Ruby 3.3); `world` names the one a test runs in. The suite's own Ruby
# process has Debian's 6.4.1 loaded, so the world's Sidekiq runs in children started through
# scripts/world (tests/interop/worlds.rb).
require "support"

module KiqdInterop
  module Sidekiq7Helpers
    # The Sidekiq version of the test's world ("7.3.10", "8.1.7") and its major (7, 8).
    def sidekiq_version = KiqdInterop::Worlds::SIDEKIQ.fetch(world)
    def sidekiq_major = KiqdInterop::Worlds.major(world)

    # Runs `body` in the world's Ruby with its Sidekiq loaded (pointed at this test's Redis); the
    # last line it prints is JSON, returned parsed.
    def sidekiq_json(name, body, *args)
      script = File.join(tmpdir, name)
      File.write(script, <<~RUBY + body)
        require "json"
        require "sidekiq"
        require "sidekiq/api"
        raise "loaded Sidekiq \#{Sidekiq::VERSION}, not #{sidekiq_version}" unless
          Sidekiq::VERSION == #{sidekiq_version.inspect}
        Sidekiq.configure_client { |c| c.redis = { url: ENV.fetch("REDIS_URL") } }
      RUBY
      out = IO.popen({ "REDIS_URL" => redis_url }, KiqdInterop::Worlds.ruby(world, script, *args),
                     err: [:child, :out], &:read)
      assert $?.success?, "#{name} (#{world}) failed:\n#{out}"
      JSON.parse(out.lines.last)
    end

    # A real Sidekiq server process, the world's (:world) or Debian's 6.4.1 (:debian), loading
    # `jobfile` and serving `queues`; returns it once it is in `processes`.
    def spawn_sidekiq_server(which, jobfile, queues, concurrency: 1)
      flags = ["-r", jobfile, "-c", concurrency.to_s, *queues.flat_map { |q| ["-q", q] }, "-t", "2"]
      child, label =
        case which
        when :world
          [spawn_child("sidekiq-#{sidekiq_version}", KiqdInterop::Worlds.sidekiq(world, *flags)),
           "Sidekiq #{sidekiq_version}"]
        when :debian
          [spawn_child("sidekiq-6.4.1", KiqdInterop.sidekiq_command("sidekiq") + flags),
           "Sidekiq 6.4.1"]
        else raise ArgumentError, which.inspect
        end
      wait_until(30, "#{label} in `processes`") do
        assert_alive(child)
        redis.smembers("processes").any? { |id| id.split(":")[-2] == child.pid.to_s }
      end
      child
    end

    # The world's sidekiqmon output for this test's Redis.
    def world_sidekiqmon
      out = IO.popen({ "REDIS_URL" => redis_url }, KiqdInterop::Worlds.sidekiq(world, bin: "sidekiqmon"),
                     err: [:child, :out], &:read)
      assert $?.success?, "sidekiqmon (#{world}) failed:\n#{out}"
      out
    end

    # The `compat auto:` decision kiqd logs beside one process of the world's Sidekiq.
    def beside_world_decision
      "1 Sidekiq #{sidekiq_major} process; presenting as Sidekiq #{sidekiq_major}"
    end

    def decision_lines(kiqd)
      kiqd.log.lines.grep(/compat auto: /).map { |l| l[/compat auto: .*/] }
    end

    def wait_for_decision(kiqd, text, timeout = 25)
      wait_until(timeout, "kiqd to log #{text.inspect}") { decision_lines(kiqd).last&.include?(text) }
    end
  end
end
