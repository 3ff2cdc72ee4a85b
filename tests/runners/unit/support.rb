# What the runner library's unit tests share (tests/runners/unit/*_test.rb). They load the
# library itself (runners/ruby/lib/kiqd/runner.rb) into the test process and drive its parts
# directly, without kiqd: a Channel over a real pipe or socketpair, the option parsing, and, once
# the test app (app.rb) is booted by KiqdRubyRunner.boot as the runner boots an app, the
# declarations and a Server with its worker threads over a socketpair. Sidekiq is whatever the
# Ruby loads: Debian's 6.4.1, or the 7.3 or 8.1 of a test world (scripts/world). Redis is a
# real redis-server on a free 127.0.0.1 port, started for the first test that boots the app and
# stopped by its PID at exit.
#
#   ruby tests/runners/unit/run_all.rb                      # Debian's Ruby and Sidekiq 6.4.1
#   bash scripts/world sidekiq81 ruby tests/runners/unit/run_all.rb
#   ruby tests/runners/unit/run_all.rb channel_test.rb -n /pieces/
require "minitest/autorun"
require_relative "../../support/minitest_interrupt"
require_relative "../../support/test_redis"
require "socket"
require "json"
require "timeout"
require_relative "../../../runners/ruby/lib/kiqd/runner"

module UnitHarness
  ROOT = File.expand_path("../../..", __dir__)
  RUNNER = File.join(ROOT, "runners/ruby/kiqd-ruby-runner")
  APP = File.join(__dir__, "app.rb")
  THREADS = 3 # what the app is booted for (its Redis pool's size); a Server may use fewer

  def self.now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  # Waits for the block to return something true, and returns it; fails after `timeout` seconds
  # (a deadline for a hung test, not a measure of anything).
  def self.wait_until(what, timeout = 30)
    deadline = now + timeout
    loop do
      result = yield
      return result if result
      raise Minitest::Assertion, "timed out waiting for #{what}" if now > deadline
      Thread.pass
      sleep 0.005
    end
  end

  # The app booted once for the whole process, as the runner boots one (Sidekiq in server mode,
  # REDIS_URL from the environment); returns the Glue that boot made.
  BOOT_LOCK = Mutex.new
  def self.booted_glue
    BOOT_LOCK.synchronize do
      @glue ||= begin
        ENV["REDIS_URL"] = TestRedis.start_for_run(timeout: 10)
        KiqdRubyRunner.boot({require: [APP]}, THREADS)
      end
    end
  end

  # What the Server's tests share: the booted app, a socketpair (the test's end and the runner's),
  # a Server with its own Glue run on a thread, payloads, and gates opened when a test fails.
  module ServerCase
    def setup
      UnitHarness.booted_glue
      UnitApp.clear
      @ours, @theirs = Socket.pair(:UNIX, :STREAM)
      @buf = "".b
      @gates = []
    end

    # A Server with `threads` workers on a Glue of its own (its own `stopping?`, and retry
    # decisions when asked), run on a thread here as a runner process runs it; returns the type
    # and data of its first frame (the ready).
    def start_server(threads, decisions: false)
      ENV["KIQD_RUNNER_DECISIONS"] = "1" if decisions
      @glue = KiqdRubyRunner::Glue.new(threads)
      ENV.delete("KIQD_RUNNER_DECISIONS")
      @runner_server = KiqdRubyRunner::Server.new(KiqdRubyRunner::Channel.new(@theirs), @glue, threads)
      @server = Thread.new { @runner_server.run }
      read_frame(@ours, @buf)
    end

    def payload(klass, *args, jid: SecureRandom.hex(12), **extra)
      {"class" => klass, "args" => args, "jid" => jid, "queue" => "default", "retry" => 5,
       "created_at" => Time.now.to_f, "enqueued_at" => Time.now.to_f}.merge(extra.transform_keys(&:to_s))
    end

    def gate(key) = @gates << key
    def release(key) = UnitApp.release(key)
    def started = UnitApp.records(:started)
  end

  # Frames as kiqd writes and reads them, on the test's end of a socket: written here by hand,
  # so that the library's Channel is not checked against itself.
  module Frames
    def frame(type, data = "")
      body = "#{type}\n".b << data.b
      [body.bytesize].pack("N") + body
    end

    def send_frame(io, type, data = "") = io.write(frame(type, data))

    # [type, data], or :eof.
    def read_frame(io, buf, timeout = 30)
      deadline = UnitHarness.now + timeout
      loop do
        if buf.bytesize >= 4 && buf.bytesize >= 4 + (len = buf.unpack1("N"))
          body = buf.byteslice(4, len)
          buf.replace(buf.byteslice(4 + len, buf.bytesize))
          type, data = body.split("\n", 2)
          return [type, data]
        end
        left = deadline - UnitHarness.now
        raise Minitest::Assertion, "no frame within #{timeout} s" if left <= 0
        next unless IO.select([io], nil, nil, left)
        chunk = io.read_nonblock(65_536, exception: false)
        return :eof if chunk.nil?
        buf << chunk unless chunk == :wait_readable
      end
    end
  end
end
