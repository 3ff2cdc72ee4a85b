# Shared helpers for the Ruby interoperability suite: free ports, a private redis-server per test,
# kiqd / kiqd_test_daemon / Ruby processes started with Process.spawn and stopped by PID, and a
# polling wait_until. Everything listens on 127.0.0.1 only.
#
# Run by hand from the repository root:
#   KIQD_BIN=build/kiqd KIQD_TEST_BIN=build/tests/kiqd_test_daemon \
#     ruby -I tests/interop tests/interop/run_all.rb
# (both variables default to those build/ paths). KIQD_INTEROP_FAST=1 skips the one check that
# waits ~60 s for a Redis TTL to run out; KIQD_INTEROP_KEEP=1 keeps every test's logs.
require "minitest/autorun"
require_relative "../support/minitest_interrupt"
require_relative "../support/test_redis"
require "socket"
require "tmpdir"
require "fileutils"
require "json"
require "yaml"
require "securerandom"
require "rbconfig"
require "net/http"
require "uri"

require_relative "quiet_redis"
require_relative "worlds"

require "sidekiq"
require "sidekiq/api"
Sidekiq.logger.level = Logger::WARN

# Worker classes used only to *push* jobs from Ruby; kiqd_test_daemon has the handlers.
module Test
  class Record
    include Sidekiq::Worker
    sidekiq_options queue: "default", retry: 3
  end

  class FailOnce
    include Sidekiq::Worker
  end
end

module KiqdInterop
  ROOT = File.expand_path("../..", __dir__)
  KIQD_BIN = File.expand_path(ENV["KIQD_BIN"] || "build/kiqd", ROOT)
  KIQD_TEST_BIN = File.expand_path(ENV["KIQD_TEST_BIN"] || "build/tests/kiqd_test_daemon", ROOT)
  RUBY = RbConfig.ruby
  FAST = ENV["KIQD_INTEROP_FAST"] == "1"

  def self.sidekiq_gem_dir
    Gem::Specification.find_by_name("sidekiq").gem_dir
  end

  # The `sidekiq` and `sidekiqmon` executables: Debian's /usr/bin wrappers if present, else the
  # gem's bin/ scripts (run with the current ruby).
  def self.sidekiq_command(name)
    wrapper = "/usr/bin/#{name}"
    return [wrapper] if File.executable?(wrapper)
    [RUBY, File.join(sidekiq_gem_dir, "bin", name)]
  end

  # Every child started by this suite, so that an interrupted run (Ctrl-C, a ctest timeout's
  # TERM) still kills what it started, by PID.
  CHILDREN = []
  Minitest.after_run do
    CHILDREN.each do |c|
      next unless c.alive?
      Process.kill("KILL", c.pid) rescue nil
      Process.wait(c.pid) rescue nil
    end
  end

  # A child process started with Process.spawn; stopped by its PID only.
  class Child
    attr_reader :pid, :name, :log_path
    attr_accessor :status

    def initialize(name, pid, log_path)
      @name = name
      @pid = pid
      @log_path = log_path
      @status = nil
      CHILDREN << self
    end

    def alive?
      return false if @status
      done = Process.waitpid2(@pid, Process::WNOHANG)
      if done
        @status = done[1]
        false
      else
        true
      end
    rescue Errno::ECHILD
      false
    end

    def signal(sig)
      Process.kill(sig, @pid) if alive?
    end

    # Waits up to `timeout` seconds for the process to exit; returns its Process::Status or nil.
    def wait(timeout)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      while alive?
        return nil if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        sleep 0.02
      end
      @status
    end

    # TERM, then KILL if it does not go away: used by teardown.
    def stop(timeout = 10)
      return @status unless alive?
      signal("TERM")
      st = wait(timeout)
      return st if st
      signal("KILL")
      wait(5)
    end

    def log
      File.exist?(@log_path.to_s) ? File.read(@log_path) : ""
    end
  end

  class KiqdProcess < Child
    attr_reader :config_path, :out_path, :redis

    def initialize(name, pid, log_path, out_path, config_path, redis)
      super(name, pid, log_path)
      @out_path = out_path
      @config_path = config_path
      @redis = redis
    end

    def log
      [super, (File.exist?(@out_path) ? File.read(@out_path) : "")].join
    end

    # "<hostname>:<pid>:<nonce>", read from the `processes` set once the first beat is in.
    def identity
      @identity ||= @redis.smembers("processes").find { |id| id.split(":")[-2] == pid.to_s }
    end
  end

  # Every test gets its own redis-server (setup) and has everything it started stopped, by PID
  # (teardown).
  module Helpers
    def setup
      super
      start_redis
    end

    # Polls the block every 25 ms until it returns a truthy value (which is returned); fails the
    # test after `timeout` seconds.
    def wait_until(timeout = 10, message = nil, interval: 0.025)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      loop do
        result = yield
        return result if result
        if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
          msg = "timed out after #{timeout} s waiting for #{message || "a condition"}"
          flunk(msg + diagnostics)
        end
        sleep interval
      end
    end

    def tmpdir
      @tmpdir ||= Dir.mktmpdir("kiqd-interop-")
    end

    def children
      @children ||= []
    end

    # Starts a private redis-server and points Sidekiq's client (and REDIS_URL for children) at it.
    def start_redis
      port = TestRedis.free_port
      log = File.join(tmpdir, "redis-#{port}.log")
      pid = TestRedis.spawn(port, out: log, err: [:child, :out], chdir: tmpdir)
      @redis_server = Child.new("redis-server", pid, log)
      children << @redis_server
      # A minute for a loaded machine; a server that exits (a port taken meanwhile) fails at once.
      TestRedis.await(port, pid, exited: lambda {
        @redis_server.alive? ? false : flunk("redis-server on port #{port} exited:\n#{File.read(log)}")
      })
      @redis_url = "redis://127.0.0.1:#{port}/0"
      @redis = Redis.new(url: @redis_url)
      old_pool = Sidekiq.instance_variable_get(:@redis)
      Sidekiq.configure_client { |c| c.redis = { url: @redis_url, size: 5 } }
      old_pool&.shutdown(&:close) rescue nil
      @redis
    end

    attr_reader :redis, :redis_url

    # Starts kiqd (or kiqd_test_daemon with test_daemon: true) with a temporary YAML config.
    # `config` is merged over the defaults; `args` are extra command-line flags.
    def start_kiqd(config = {}, args: [], test_daemon: false, name: "kiqd")
      bin = test_daemon ? KiqdInterop::KIQD_TEST_BIN : KiqdInterop::KIQD_BIN
      skip "#{bin} is not built (set KIQD_BIN / KIQD_TEST_BIN)" unless File.executable?(bin)
      n = children.count { |c| c.is_a?(KiqdProcess) }
      log_path = File.join(tmpdir, "#{name}-#{n}.log")
      out_path = File.join(tmpdir, "#{name}-#{n}.out")
      config_path = File.join(tmpdir, "#{name}-#{n}.yml")
      full = {
        "concurrency" => 2,
        "timeout" => 2, # so that teardown's TERM ends long Sleep jobs quickly
        "queues" => ["default"],
        "poll_interval_average" => 1,
        "redis" => { "url" => redis_url },
        "logging" => { "level" => "debug", "file" => log_path },
      }.merge(config)
      File.write(config_path, full.to_yaml)
      pid = Process.spawn(bin, "-C", config_path, *args,
                          in: File::NULL, out: out_path, err: [:child, :out])
      proc = KiqdProcess.new(name, pid, log_path, out_path, config_path, redis)
      children << proc
      # A kiqd with a runner registers once the runner has booted the app, as Sidekiq does.
      wait_until(60, "#{name} (pid #{pid}) to register in `processes`") do
        flunk("#{name} exited early: #{proc.status.inspect}#{diagnostics}") unless proc.alive?
        proc.identity
      end
      proc
    end

    # Spawns any command with REDIS_URL pointing at this test's Redis; output goes to a log file.
    def spawn_child(name, cmd, env: {}, chdir: tmpdir)
      log = File.join(tmpdir, "#{name}-#{children.size}.log")
      pid = Process.spawn({ "REDIS_URL" => redis_url }.merge(env), *cmd,
                          in: File::NULL, out: log, err: [:child, :out], chdir: chdir)
      child = Child.new(name, pid, log)
      children << child
      child
    end

    # Writes a Ruby script for a child process to tmpdir (returns its path); it loads redis-rb
    # quietly first, as this suite does.
    def write_ruby_script(name, body)
      path = File.join(tmpdir, name)
      File.write(path, "require #{File.join(__dir__, "quiet_redis.rb").inspect}\n" + body)
      path
    end

    # A real Ruby Sidekiq process that loads `jobfile` and serves `default` (-t 2: quick stops).
    def spawn_sidekiq(jobfile, concurrency, *extra)
      spawn_child("sidekiq", KiqdInterop.sidekiq_command("sidekiq") +
                             ["-r", jobfile, "-c", concurrency.to_s, "-q", "default", "-t", "2",
                              *extra])
    end

    # Fails the test, with the child's log, when `child` has exited.
    def assert_alive(child)
      flunk("#{child.name} exited: #{child.status.inspect}\n#{child.log}") unless child.alive?
    end

    # Waits up to `timeout` seconds for `child` to exit, and asserts that it did, with status 0.
    def assert_exits_cleanly(child, timeout, message)
      status = child.wait(timeout)
      assert status, message
      assert_equal 0, status.exitstatus, child.log
      status
    end

    # Records of Test::Record / Test::FailOnce runs (kiqd_test_daemon), oldest first.
    def ran_records
      redis.lrange("kiqd-test:ran", 0, -1).map { |s| JSON.parse(s) }
    end

    # Waits until kiqd_test_daemon has recorded every jid in `expected`, and asserts that each
    # ran exactly once; returns [records, records grouped by jid].
    def wait_for_each_run_once(expected, timeout = 20)
      records = wait_until(timeout, "all #{expected.size} jobs to be recorded") do
        recs = ran_records
        recs if expected.all? { |jid| recs.any? { |r| r["jid"] == jid } }
      end
      by_jid = records.group_by { |r| r["jid"] }
      expected.each { |jid| assert_equal 1, by_jid[jid].size, "jid #{jid} must run exactly once" }
      [records, by_jid]
    end

    def process_for(kiqd)
      Sidekiq::ProcessSet.new.find { |p| p.identity == kiqd.identity }
    end

    # Waits until Sidekiq::Workers shows the job `jid` running in `kiqd`; returns [tid, work].
    def wait_for_running(kiqd, jid, timeout = 12)
      wait_until(timeout, "job #{jid} in Sidekiq::Workers") do
        found = Sidekiq::Workers.new.find do |id, _tid, work|
          id == kiqd.identity && work["payload"]["jid"] == jid
        end
        found && found[1..]
      end
    end

    # The `beat` value of a process; useful to wait for "one more heartbeat".
    def beat_of(kiqd)
      redis.hget(kiqd.identity, "beat").to_f
    end

    # Waits until kiqd has written `count` more heartbeats than it had when called.
    def wait_for_beats(kiqd, count = 1, timeout: 6 * count + 2)
      last = beat_of(kiqd)
      seen = 0
      wait_until(timeout, "#{count} heartbeat(s) of #{kiqd.identity}") do
        b = beat_of(kiqd)
        if b > last
          seen += 1
          last = b
        end
        seen >= count
      end
    end

    # Serves Sidekiq::Web (Rack + WEBrick on 127.0.0.1) from a child Ruby pointed at this test's
    # Redis: Debian's Ruby and Sidekiq 6.4.1 by default, or the Ruby and Sidekiq of `world`
    # (rack 2's Rack::Handler::WEBrick, or rackup's Rackup::Handler::WEBrick under rack 3).
    # Returns the base URL once "/" answers 200.
    def start_web_ui(world = nil, name: "web-ui")
      port = TestRedis.free_port
      script = File.join(tmpdir, "#{name}.rb")
      quiet = world ? "" : "require #{File.join(__dir__, "quiet_redis.rb").inspect}\n"
      File.write(script, quiet + <<~RUBY)
        require "securerandom"
        require "rack"
        require "rack/session/cookie"
        require "webrick"
        if Rack.release >= "3"
          require "rackup/handler/webrick"
          handler = Rackup::Handler::WEBrick
        else
          require "rack/handler/webrick"
          handler = Rack::Handler::WEBrick
        end
        require "sidekiq/web"
        Sidekiq.configure_client { |c| c.redis = { url: ENV.fetch("REDIS_URL") } }
        app = Rack::Builder.new do
          use Rack::Session::Cookie, secret: SecureRandom.hex(64), same_site: true, max_age: 86400
          run Sidekiq::Web
        end
        handler.run(app, Host: "127.0.0.1", Port: #{port}, AccessLog: [],
                         Logger: WEBrick::Log.new($stderr, WEBrick::Log::WARN))
      RUBY
      cmd = world ? KiqdInterop::Worlds.ruby(world, script) : [KiqdInterop::RUBY, script]
      web = spawn_child(name, cmd)
      base = "http://127.0.0.1:#{port}"
      wait_until(30, "the Web UI to answer on #{base}") do
        assert_alive(web)
        http_get(base + "/").code == "200"
      rescue SystemCallError, Net::OpenTimeout, Net::ReadTimeout, EOFError
        false
      end
      base
    end

    def http_get(url, headers = {})
      uri = URI(url)
      Net::HTTP.start(uri.host, uri.port, open_timeout: 5, read_timeout: 20) do |http|
        http.get(uri.request_uri, headers)
      end
    end

    # $CHROMIUM if set (CHROMIUM=none simulates a machine without a browser), else Debian's path.
    def chromium_path
      candidates = ENV["CHROMIUM"] ? [ENV["CHROMIUM"]] : %w[/usr/bin/chromium /usr/bin/chromium-browser]
      candidates.find { |p| File.file?(p) && File.executable?(p) }
    end

    def chromium(url, *mode)
      profile = Dir.mktmpdir("chromium-profile-", tmpdir)
      cmd = [chromium_path, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--disable-dev-shm-usage", "--user-data-dir=#{profile}",
             "--window-size=1400,900", *mode, url]
      child = spawn_child("chromium", cmd)
      status = child.wait(90)
      assert status, "chromium did not finish within 90 s"
      assert status.success?, "chromium failed: #{child.log[-2000..] || child.log}"
      child.log
    end

    def diagnostics
      out = +""
      children.each do |c|
        next if c.name == "redis-server"
        text = c.log
        text = text[-4000..] if text.size > 4000
        out << "\n---- #{c.name} pid #{c.pid} (#{c.log_path}) ----\n#{text}"
      end
      out
    end

    def teardown
      # Stop everything but Redis first (they may want to write to it on the way out).
      children.reject { |c| c.name == "redis-server" }.reverse_each { |c| c.stop(10) }
      children.select { |c| c.name == "redis-server" }.each { |c| c.stop(5) }
      @redis&.close rescue nil
      if (passed? || skipped?) && !ENV["KIQD_INTEROP_KEEP"]
        FileUtils.rm_rf(@tmpdir) if @tmpdir
      elsif @tmpdir
        puts "\n[interop] logs of #{name} kept in #{@tmpdir}"
      end
      super
    end
  end
end
