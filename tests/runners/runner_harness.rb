# The harness of tests/runners/runner_protocol_test.rb: a real redis-server for the file (one
# database per running test), a runner started on its end of a socketpair as kiqd starts one
# (Runner: frames, descriptors, exit), and SharedTests, what every runner (Ruby and Python) must
# do. The runner-specific suites and the test classes are in runner_protocol_test.rb.
require "socket"
require "io/nonblock"
require "json"
require "tmpdir"
require "fileutils"
require "securerandom"
require "time"
require "redis"
require_relative "../support/test_redis"
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)

module RunnerHarness
  ROOT = File.expand_path("../..", __dir__)
  WORLD = File.join(ROOT, "scripts/world")
  RUBY_RUNNER = File.join(ROOT, "runners/ruby/kiqd-ruby-runner")
  PY_RUNNER = File.join(ROOT, "runners/python/kiqd_runner.py")

  def self.now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  # One redis-server for the whole file, stopped by its PID at the end; each test running at
  # the same time has a database of its own (DATABASES).
  REDIS_LOCK = Mutex.new
  DATABASES = Queue.new.tap { |q| 16.times { |i| q << i } }

  def self.redis_url
    REDIS_LOCK.synchronize { @redis_url ||= TestRedis.start_for_run }
  end

  # A runner process and our end of its protocol socket.
  class Runner
    attr_reader :pid, :log

    # Starts `cmd` with its end of a new socketpair as descriptor 3.
    def self.spawn(cmd, env, log)
      ours, theirs = Socket.pair(:UNIX, :STREAM)
      theirs.nonblock = false # as kiqd hands it over (Ruby makes new sockets non-blocking)
      pid = Process.spawn(env.merge("KIQD_RUNNER_FD" => "3"), *cmd, 3 => theirs,
                          in: File::NULL, out: log, err: [:child, :out])
      theirs.close
      new(ours, pid, log, own: true)
    end

    # own: false for a runner forked by a master (not our child: stop only closes its socket).
    def initialize(sock, pid, log, own:)
      @sock = sock
      @pid = pid
      @log = log
      @buf = "".b
      @status = own ? nil : :not_ours
    end

    def send_frame(type, data)
      body = "#{type}\n".b << data.b
      @sock.write([body.bytesize].pack("N"), body)
    end

    # A frame with descriptors attached (SCM_RIGHTS), as kiqd's `fork`.
    def send_fds(type, data, ios)
      body = "#{type}\n".b << data.b
      @sock.sendmsg([body.bytesize].pack("N") + body, 0, nil, Socket::AncillaryData.unix_rights(*ios))
    end

    def job(tag, payload) = send_frame(tag ? "job #{tag}" : "job", JSON.generate(payload))

    # [type, data], or :eof; raises after `timeout` seconds without a whole frame.
    def read_frame(timeout = 20)
      deadline = RunnerHarness.now + timeout
      loop do
        if @buf.bytesize >= 4 && @buf.bytesize >= 4 + (len = @buf.unpack1("N"))
          body = @buf.byteslice(4, len)
          @buf = @buf.byteslice(4 + len, @buf.bytesize)
          type, data = body.split("\n", 2)
          return [type, data]
        end
        left = deadline - RunnerHarness.now
        raise "no frame from the runner within #{timeout} s\n#{File.read(@log)}" if left <= 0
        next unless IO.select([@sock], nil, nil, left)
        chunk = @sock.read_nonblock(65536, exception: false)
        return :eof if chunk.nil?
        @buf << chunk unless chunk == :wait_readable
      end
    end

    def close_write = @sock.shutdown(Socket::SHUT_WR)

    def signal(sig) = Process.kill(sig, @pid)

    # The exit status, or nil if it is still running after `timeout` seconds.
    def wait_exit(timeout = 10)
      deadline = RunnerHarness.now + timeout
      until @status
        done = Process.waitpid2(@pid, Process::WNOHANG)
        @status = done[1] if done
        return nil if !@status && RunnerHarness.now > deadline
        sleep 0.01 unless @status
      end
      @status
    end

    def stop
      unless @status
        Process.kill("KILL", @pid) rescue nil
        Process.wait(@pid) rescue nil
        @status = true
      end
      @sock.close unless @sock.closed?
    end
  end

  # What every runner must do; the classes below say how to start one and read its records.
  module SharedTests
    def setup
      @dir = Dir.mktmpdir("kiqd-runner-test-")
      @gates = File.join(@dir, "gates")
      @out = File.join(@dir, "out")
      FileUtils.mkdir_p([@gates, @out])
      @db = RunnerHarness::DATABASES.pop
      @redis_url = RunnerHarness.redis_url.sub(%r{/0\z}, "/#{@db}")
      @redis = Redis.new(url: @redis_url)
      @redis.flushdb
      @runners = []
    end

    def teardown
      @runners.each(&:stop)
      @redis.close
      RunnerHarness::DATABASES << @db
      if passed? || skipped?
        FileUtils.rm_rf(@dir)
      else
        puts "kept #{@dir}"
      end
    end

    def env = {"REDIS_URL" => @redis_url, "APP_GATES" => @gates, "APP_OUT" => @out}

    # Starts a runner with KIQD_RUNNER_THREADS=threads (and `extra` in its environment) and
    # returns it once it said `ready`.
    def start_runner(threads: 5, extra: {})
      log = File.join(@dir, "runner-#{@runners.size}.log")
      r = RunnerHarness::Runner.spawn(command, env.merge("KIQD_RUNNER_THREADS" => threads.to_s).merge(extra), log)
      @runners << r
      type, data = r.read_frame(30)
      assert_equal "ready", type, File.read(log)
      ready = JSON.parse(data)
      assert_equal r.pid, ready["pid"]
      assert_equal threads, ready["threads"], "the runner announces KIQD_RUNNER_THREADS"
      assert_match expected_runner, ready["runner"]
      r
    end

    def wait_until(what, timeout = 20)
      deadline = RunnerHarness.now + timeout
      loop do
        result = yield
        return result if result
        flunk "timed out waiting for #{what}\n#{@runners.map { |r| File.read(r.log) }.join}" if RunnerHarness.now > deadline
        sleep 0.01
      end
    end

    def gate(name) = File.mkfifo(File.join(@gates, name))

    # Opens the gate once its job waits there (opening a FIFO's write end without a reader fails).
    def release(name)
      wait_until("a job at gate #{name}") do
        File.open(File.join(@gates, name), File::WRONLY | File::NONBLOCK).close
        true
      rescue Errno::ENXIO
        false
      end
    end

    def payload(klass, *args, jid: SecureRandom.hex(12), **extra)
      {"class" => klass, "args" => args, "jid" => jid, "queue" => "default", "retry" => 5,
       "created_at" => Time.now.to_f, "enqueued_at" => Time.now.to_f}.merge(extra.transform_keys(&:to_s))
    end

    def test_concurrent_jobs_overlap_and_each_tag_gets_one_answer_in_completion_order
      r = start_runner(threads: 5)
      keys = %w[g1 g2 g3 g4 g5]
      keys.each { |k| gate(k) }
      keys.each_with_index { |k, i| r.job(i + 1, payload("GateJob", k)) }
      # No job can finish before its gate opens: five started records mean five ran at once.
      started = wait_until("five jobs running at once") do
        s = records("started")
        s if s.size == 5
      end
      assert_equal keys.sort, started.map(&:first).sort
      assert_equal 5, started.map(&:last).uniq.size, "each job on its own thread"
      [5, 3, 1, 4, 2].each do |tag|
        release(keys[tag - 1])
        assert_equal ["done #{tag}", "{}"], r.read_frame
      end
      assert_equal %w[g5 g3 g1 g4 g2], records("finished").map(&:first)
      r.close_write
      assert_equal :eof, r.read_frame, "no second answer for any tag"
      assert_equal 0, r.wait_exit.exitstatus
    end

    def test_fail_frames_exhausted_and_untagged_frames
      r = start_runner
      jid = SecureRandom.hex(12)
      r.job(7, payload("FailJob", "boom", jid: jid, retry_count: 2))
      type, data = r.read_frame
      assert_equal "fail 7", type
      fail = JSON.parse(data)
      assert_match(/ModeError\z/, fail["class"])
      assert_equal "boom", fail["message"]
      assert_kind_of Array, fail["backtrace"]
      assert_match(/#{Regexp.escape(app_file)}:\d+:in `check'/, fail["backtrace"].first)
      assert_equal 400, fail["retry_in"], "sidekiq_retry_in for retry count 3 (after this failure)"

      # An untagged frame (a kiqd without the tagged dialect) is answered untagged.
      r.job(nil, payload("FailJob", "plain"))
      type, data = r.read_frame
      assert_equal "fail", type
      assert_equal 100, JSON.parse(data)["retry_in"], "first failure: retry count 0"

      dead = payload("ExhaustedJob", jid: "dead-#{jid}", retry_count: 2, error_class: "IOError",
                                    error_message: "disk gone")
      r.send_frame("exhausted 8", JSON.generate({"job" => dead, "error" => {"class" => "IOError", "message" => "disk gone"}}))
      assert_equal ["done 8", "{}"], r.read_frame
      assert_equal "dead-#{jid}", records("exhausted").first&.first
    end

    def test_sigterm_abandons_running_jobs_without_an_answer
      r = start_runner
      3.times { |i| r.job(i + 1, payload("SleepJob", "s#{i}")) }
      wait_until("three jobs sleeping") { records("started").size == 3 }
      r.signal("TERM")
      assert_equal :eof, r.read_frame, "no answer for abandoned jobs"
      status = r.wait_exit
      refute_nil status, "the runner exits on SIGTERM"
      after_sigterm
    end

    def test_end_of_file_finishes_the_jobs_in_hand_then_exits
      r = start_runner
      %w[e1 e2 e3].each { |k| gate(k) }
      %w[e1 e2 e3].each_with_index { |k, i| r.job(i + 1, payload("GateJob", k)) }
      wait_until("three jobs at their gates") { records("started").size == 3 }
      r.close_write
      %w[e2 e3 e1].each { |k| release(k) }
      answers = Array.new(3) { r.read_frame }
      assert_equal ["done 1", "done 2", "done 3"], answers.map(&:first).sort
      assert_equal :eof, r.read_frame
      assert_equal 0, r.wait_exit.exitstatus
    end
  end
end
