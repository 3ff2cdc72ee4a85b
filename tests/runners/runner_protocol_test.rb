# The runners (runners/ruby/kiqd-ruby-runner and runners/python/kiqd_runner.py) driven exactly as
# kiqd drives them, without kiqd: each is started with its end of a real socketpair as descriptor
# 3, KIQD_RUNNER_FD=3, KIQD_RUNNER_THREADS=5 and REDIS_URL pointing at a real redis-server on a
# free loopback port; the test sends tagged frames and reads the answers. The Ruby runner is
# tested with Debian's Sidekiq 6.4.1 (Debian's Ruby) and inside the test worlds sidekiq73
# (Sidekiq 7.3, Ruby 3.1) and sidekiq81 (Sidekiq 8.1, Ruby 3.3): there the runner is started
# through scripts/world, which execs the world's Ruby with the world's bundle (so the runner's
# pid is the one this test spawned). A world that is not installed fails its tests with the
# command that installs it. Each loads tests/runners/sidekiq_app; the Python runner loads
# tests/runners/python_app/concurrent_jobs.py. This file itself runs on Debian's Ruby (it only
# needs redis-rb and minitest).
#
#   ruby tests/runners/runner_protocol_test.rb            # (ctest -L runners)
#   ruby tests/runners/runner_protocol_test.rb -n /Sidekiq81/
#
# Jobs that must overlap wait at gates (FIFOs the test opens), so overlap and answer order are
# facts the jobs record, not timings.
require "minitest/autorun"
require_relative "../support/minitest_interrupt"
require_relative "runner_harness"
# The tests mostly wait for runner processes: three at a time, each with its own Redis database.
Minitest.parallel_executor = Minitest::Parallel::Executor.new(3)

module RunnerHarness
  module RubyRunnerTests
    include SharedTests

    def command = [RbConfig.ruby, RUBY_RUNNER, "--require", app_file]
    def app_file = File.join(ROOT, "tests/runners/sidekiq_app/app.rb")
    def records(list) = @redis.lrange("app:#{list}", 0, -1).map { |s| JSON.parse(s) }

    def after_sigterm
      ensured = records("ensure")
      assert_equal 3, ensured.size, "each abandoned job's ensure block ran"
      assert ensured.all? { |_, err| err == "Sidekiq::Shutdown" }, ensured.inspect
    end

    # KIQD_RUNNER_PRELOAD=1: the master boots once, runs no job, and forks a child per `fork`
    # frame; the child starts its threads after the fork.
    def test_preload_master_forks_children_that_run_jobs_on_threads
      master = RunnerHarness::Runner.spawn(command, env.merge("KIQD_RUNNER_THREADS" => "5", "KIQD_RUNNER_PRELOAD" => "1"),
                                         File.join(@dir, "master.log"))
      @runners << master
      type, data = master.read_frame(30)
      assert_equal "ready", type
      assert_equal true, JSON.parse(data)["preload"]
      ours, theirs = Socket.pair(:UNIX, :STREAM)
      theirs.nonblock = false
      child_log = File.open(File.join(@dir, "child.log"), "w")
      master.send_fds("fork", JSON.generate({"slot" => 1}), [theirs, child_log, child_log])
      [theirs, child_log].each(&:close)
      type, data = master.read_frame
      assert_equal "forked", type
      forked = JSON.parse(data)
      assert_equal 1, forked["slot"]
      child = RunnerHarness::Runner.new(ours, forked["pid"], File.join(@dir, "child.log"), own: false)
      @runners << child
      type, data = child.read_frame
      assert_equal "ready", type
      assert_equal({"pid" => forked["pid"], "threads" => 5}, JSON.parse(data).slice("pid", "threads"))
      %w[p1 p2].each { |k| gate(k) }
      %w[p1 p2].each_with_index { |k, i| child.job(i + 1, payload("GateJob", k)) }
      wait_until("both jobs running at once in the forked child") { records("started").size == 2 }
      %w[p2 p1].each { |k| release(k) }
      assert_equal ["done 1", "done 2"], Array.new(2) { child.read_frame.first }.sort
      child.close_write
      assert_equal :eof, child.read_frame
      type, data = master.read_frame
      assert_equal ["exited", {"pid" => forked["pid"], "status" => 0}], [type, JSON.parse(data)]
      master.close_write
      assert_equal 0, master.wait_exit.exitstatus
    end

    def test_middleware_context_redis_url_skip_activejob_and_handlers
      r = start_runner
      jid = SecureRandom.hex(12)
      r.job(1, payload("EnqueueJob", 42, jid: jid))
      assert_equal ["done 1", "{}"], r.read_frame
      assert_includes records("middleware"), ["EnqueueJob", jid, "default", jid],
                      "the server middleware ran, inside the job's logging context"
      pushed = @redis.lrange("queue:default", 0, -1).map { |s| JSON.parse(s) }
      assert_equal [["OtherJob", [42]]], pushed.map { |j| [j["class"], j["args"]] }, "perform_async through REDIS_URL"
      assert_equal "1", @redis.get("app:enqueue_calls")

      r.job(2, payload("SkippedJob"))
      assert_equal ["done 2", "{}"], r.read_frame, "Sidekiq::JobRetry::Skip from a middleware: done"
      assert_empty records("started")

      wrapper = "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"
      job_id = SecureRandom.uuid
      aj = {"job_class" => "GreetJob", "job_id" => job_id, "provider_job_id" => nil, "queue_name" => "default",
            "priority" => nil, "arguments" => ["Ada"], "executions" => 0, "exception_executions" => {},
            "locale" => "en", "timezone" => "UTC", "enqueued_at" => Time.now.utc.iso8601}
      r.job(3, payload(wrapper, aj, jid: "aj-#{jid}", wrapped: "GreetJob"))
      assert_equal ["done 3", "{}"], r.read_frame
      assert_equal [["Ada", job_id, "aj-#{jid}"]], records("greeted")

      r.job(4, payload("FailJob", "x", jid: "f-#{jid}"))
      assert_equal "fail 4", r.read_frame.first
      assert_equal [["ModeError", "f-#{jid}"]], records("errors"), "the application's error handler saw the failure"

      # retry: false takes Sidekiq's other path: the death handlers, not sidekiq_retries_exhausted.
      dead = payload("NoRetryJob", jid: "nr-#{jid}", retry: false)
      r.send_frame("exhausted 5", JSON.generate({"job" => dead, "error" => {"class" => "ArgumentError", "message" => "no"}}))
      assert_equal ["done 5", "{}"], r.read_frame
      assert_empty records("exhausted")
      assert_includes records("deaths"), ["NoRetryJob", "nr-#{jid}", "ArgumentError", "no"]
    end
  end

  # The Sidekiq version a world's lock pins (tests/gemfiles/WORLD.gemfile.lock).
  def self.locked_sidekiq(world)
    lock = File.join(ROOT, "tests/gemfiles/#{world}.gemfile.lock")
    File.read(lock)[/^    sidekiq \(([\d.]+)\)$/, 1] or raise "no sidekiq in #{lock}"
  end

  # nil when `world` is installed (its Ruby loads the world's Sidekiq and ActiveJob), else why
  # not; asked once per world.
  WORLD_LOCK = Mutex.new
  def self.world_problem(world)
    WORLD_LOCK.synchronize do
      (@world_problems ||= {}).fetch(world) do
        out = IO.popen([WORLD, world, "ruby", "-e", 'require "sidekiq"; require "active_job"; print Sidekiq::VERSION'],
                       err: [:child, :out], &:read)
        @world_problems[world] =
          if !$?.success?
            "the #{world} world is not installed (run: bash scripts/install-gems #{world}):\n#{out}"
          elsif out != locked_sidekiq(world)
            "the #{world} world loads Sidekiq #{out}, its lock pins #{locked_sidekiq(world)} " \
              "(run: bash scripts/install-gems #{world})"
          end
      end
    end
  end

  # The Ruby runner inside a test world (scripts/world): `world` and `ruby_version` (a Regexp
  # source) name it. The world must be installed: the tests fail, not skip, without it.
  # The application's lifecycle events and exceptions no constructor can rebuild, on every
  # Sidekiq the Ruby runner runs with.
  module RubyRunnerEventTests
    def events = records("events").map(&:first)

    # The major version of the Sidekiq the runner loaded (each event records it).
    def sidekiq_major = wait_until("a lifecycle event") { records("events").first&.last }

    # startup before ready, then the first heartbeat's `heartbeat` (and `beat`, 7.x/8.x);
    # `quiet` on kiqd's quiet, `shutdown` at end of file, and on 8.x `exit` last; each once.
    def test_lifecycle_events_fire_as_under_sidekiq
      r = start_runner
      major = sidekiq_major
      first = major >= 7 ? %w[startup heartbeat beat] : %w[startup heartbeat]
      wait_until("the first heartbeat's events") { events.first(first.size) == first }
      assert records("events").all? { |_, pid, _| pid == r.pid }, "fired in the process that runs jobs"
      r.job(1, payload("OtherJob", 1))
      assert_equal ["done 1", "{}"], r.read_frame
      r.send_frame("quiet", "{}")
      wait_until("quiet") { events.include?("quiet") }
      r.close_write
      assert_equal :eof, r.read_frame
      assert_equal 0, r.wait_exit.exitstatus
      last = major >= 8 ? %w[quiet shutdown exit] : %w[quiet shutdown]
      # Later beats (every 10 s) may fall anywhere after the first ones.
      assert_equal first + last, first + (events.drop(first.size) - ["beat"])
    end

    # kiqd's shutdown sends quiet {"shutdown":true}: quiet then shutdown fire while the jobs
    # run; SIGTERM then ends the process (and 8.x's `exit` fires).
    def test_shutdown_quiet_and_sigterm_fire_quiet_shutdown_once
      r = start_runner
      major = sidekiq_major
      r.job(1, payload("SleepJob", "s1"))
      wait_until("the job sleeping") { records("started").size == 1 }
      r.send_frame("quiet", JSON.generate({"shutdown" => true}))
      wait_until("quiet and shutdown") { events.include?("shutdown") }
      r.signal("TERM")
      assert_equal :eof, r.read_frame
      refute_nil r.wait_exit
      stops = events - %w[startup heartbeat beat]
      assert_equal "startup", events.first
      assert_equal major >= 8 ? %w[quiet shutdown exit] : %w[quiet shutdown], stops
    end

    # The hooks of an exhausted job get an exception of its own class even when the class's
    # constructor wants a response object; a message that raises still fails the job as itself.
    # The process serves on.
    def test_exceptions_that_cannot_be_rebuilt_or_read_do_not_end_the_process
      r = start_runner
      r.job(1, payload("ApiJob"))
      type, data = r.read_frame
      assert_equal "fail 1", type
      fail = JSON.parse(data)
      assert_equal ["ApiError", "the API answered 503"], [fail["class"], fail["message"]]
      dead = payload("ApiJob", jid: "api-1", retry_count: 25, error_class: "ApiError",
                               error_message: fail["message"])
      r.send_frame("exhausted 2", JSON.generate({"job" => dead, "error" => {"class" => "ApiError", "message" => fail["message"]}}))
      assert_equal ["done 2", "{}"], r.read_frame
      assert_equal [["api-1", "ApiError", "the API answered 503"]], records("exhausted")
      r.job(3, payload("UnreadableJob"))
      type, data = r.read_frame
      assert_equal "fail 3", type
      assert_equal "UnreadableError", JSON.parse(data)["class"]
      r.job(4, payload("OtherJob", 1))
      assert_equal ["done 4", "{}"], r.read_frame, "the same process still runs jobs"
    end
  end

  # With KIQD_RUNNER_DECISIONS=1 the job runs inside the app's own Sidekiq::JobRetry: the answer
  # carries Sidekiq's decision, and what Sidekiq does after its write waits for `written`.
  module RubyRunnerDecisionTests
    DECISIONS = {"KIQD_RUNNER_DECISIONS" => "1"}.freeze

    def jids(list) = records(list).map { |_, jid, *| jid }

    # A retry: sidekiq_retry_in gives its delay; the error handlers run only after `written`.
    def test_decision_retry_then_error_handlers_after_the_write
      r = start_runner(extra: DECISIONS)
      before = Time.now.to_f
      r.job(1, payload("FailJob", "boom", jid: "r-1"))
      type, data = r.read_frame
      assert_equal "fail 1", type
      fail = JSON.parse(data)
      assert_equal %w[ModeError boom retry], fail.values_at("class", "message", "decision")
      assert_operator fail["retry_at"], :>=, before + 100, "sidekiq_retry_in's 100 s (count 0) plus jitter"
      assert_operator fail["retry_at"], :<, Time.now.to_f + 100 + 10
      # 6.x calls sidekiq_retry_in with (count, exception), 7.x/8.x with the job too.
      assert_equal [[0, "ModeError", sidekiq_major_of_app >= 7 ? "ModeError" : nil]], records("retry_in")
      assert_empty records("errors"), "the error handlers wait for the retry to be written"
      r.send_frame("written 1", "{}")
      assert_equal ["done 1", "{}"], r.read_frame
      assert_equal [["ModeError", "r-1"]], records("errors")
    end

    # The last retry: no sidekiq_retry_in; the exhausted block sees the real exception before
    # the morgue write; the death handlers run after `written`, then the error handlers.
    def test_decision_dead_runs_exhausted_before_and_death_handlers_after_the_write
      r = start_runner(extra: DECISIONS)
      @redis.zadd("dead", 1, "{}") # the exhausted block reports the dead set's size
      r.job(1, payload("FailJob", "boom", jid: "d-1", retry: 5, retry_count: 4))
      type, data = r.read_frame
      assert_equal "fail 1", type
      assert_equal "dead", JSON.parse(data)["decision"]
      assert_empty records("retry_in"), "sidekiq_retry_in is not called on the last failure"
      assert_equal [["d-1", "ModeError", "boom", 1]], records("exhausted"),
                   "the exhausted block ran first, with the job not yet in the dead set"
      assert_empty records("deaths")
      assert_empty records("errors")
      r.send_frame("written 1", "{}")
      assert_equal ["done 1", "{}"], r.read_frame
      assert_equal ["d-1"], jids("deaths")
      assert_equal [["ModeError", "d-1"]], records("errors")
    end

    # Nothing to write: :discard from the exhausted block, retry: false, and a sidekiq_retry_in
    # that raises (the error handlers get its exception, and the default delay is used).
    def test_decision_discard_retry_false_and_a_raising_retry_in
      r = start_runner(extra: DECISIONS)
      major = sidekiq_major_of_app
      r.job(1, payload("FailJob", "keep-out", jid: "k-1", retry: 1, retry_count: 0))
      type, data = r.read_frame
      assert_equal "fail 1", type
      assert_equal ["k-1"], records("exhausted").map(&:first)
      if major == 6
        # 6.x ignores what the block returns: the morgue is written, then the death handlers run.
        assert_equal "dead", JSON.parse(data)["decision"]
        r.send_frame("written 1", "{}")
        assert_equal ["done 1", "{}"], r.read_frame
      else
        assert_equal "discard", JSON.parse(data)["decision"], "discarded by sidekiq_retries_exhausted"
      end
      # 7.x returns before the death handlers; 6.x and 8.x run them.
      expect_deaths = major == 7 ? [] : ["k-1"]
      assert_equal expect_deaths, jids("deaths")

      r.job(2, payload("NoRetryJob", jid: "n-2", retry: false))
      type, data = r.read_frame
      assert_equal ["fail 2", "discard"], [type, JSON.parse(data)["decision"]]
      assert_equal expect_deaths + ["n-2"], jids("deaths"), "retry: false: the death handlers only"
      assert_equal ["k-1"], records("exhausted").map(&:first)

      r.job(3, payload("FailJob", "bad-retry-in", jid: "b-3"))
      type, data = r.read_frame
      assert_equal ["fail 3", "retry"], [type, JSON.parse(data)["decision"]]
      assert_equal [["RuntimeError", nil]], records("errors").last(1),
                   "the exception raised in sidekiq_retry_in went to the error handlers"
      r.send_frame("written 3", "{}")
      assert_equal ["done 3", "{}"], r.read_frame
      assert_equal ["ModeError", "b-3"], records("errors").last
    end

    def sidekiq_major_of_app = wait_until("a lifecycle event") { records("events").first&.last }
  end

  module WorldRunner
    def setup
      super
      problem = RunnerHarness.world_problem(world)
      flunk problem if problem
    end

    def command = [WORLD, world, "ruby", RUBY_RUNNER, "--require", app_file]

    def expected_runner
      /\Akiqd-ruby-runner \S+ \(ruby #{ruby_version}, sidekiq #{Regexp.escape(RunnerHarness.locked_sidekiq(world))}\)\z/
    end
  end

  # What the Ruby runner does on Sidekiq 7.x and 8.x only.
  module Sidekiq7PlusTests
    def test_retry_in_kill_and_discard
      r = start_runner
      r.job(1, payload("FailJob", "kill", jid: "kill-1"))
      r.job(2, payload("FailJob", "discard", jid: "discard-2"))
      answers = Array.new(2) { r.read_frame }.to_h { |type, data| [type, JSON.parse(data)["retry_in"]] }
      assert_equal({"fail 1" => "kill", "fail 2" => "discard"}, answers)
      assert_equal [[0, "ModeError", "ModeError"]] * 2, records("retry_in"),
                   "7.x and 8.x call sidekiq_retry_in with (count, exception, job)"
      deaths = records("deaths").map { |_, jid, *| jid }
      if discard_runs_death_handlers?
        assert_equal ["discard-2"], deaths, "8.x runs the death handlers for a :discard (JobRetry#process_retry)"
      else
        assert_empty deaths, "7.x discards without the death handlers; :kill's are kiqd's exhausted frame"
      end
    end

    def test_quiet_makes_an_iterable_job_save_its_cursor_and_requeue_itself
      # One thread, busy with the job: `quiet` still gets read while it runs.
      r = start_runner(threads: 1)
      gate("walk-1")
      jid = SecureRandom.hex(12)
      r.job(1, payload("WalkJob", "walk", jid: jid))
      wait_until("the iteration at item 1") { records("walked").any? { |_, item, _| item == 1 } }
      r.send_frame("quiet", "{}")
      release("walk-1")
      assert_equal ["done 1", "{}"], r.read_frame, "an interrupted iteration is done (re-pushed by the app)"
      assert_equal [0, 1], records("walked").map { |_, item, _| item }
      requeued = @redis.lrange("queue:default", 0, -1).map { |s| JSON.parse(s) }
      assert_equal [["WalkJob", jid]], requeued.map { |j| [j["class"], j["jid"]] }
      state = @redis.hgetall("it-#{jid}")
      assert_equal "1", state["ex"], "one execution so far"
      assert_equal "2", state["c"], "the cursor: the next item to run"

      # The re-pushed job, run by a process that is not quieting, resumes at its cursor.
      r2 = start_runner
      r2.send_frame("job 1", @redis.lpop("queue:default"))
      assert_equal ["done 1", "{}"], r2.read_frame
      assert_equal [0, 1, 2, 3, 4], records("walked").map { |_, item, _| item }
      assert_equal 0, @redis.exists("it-#{jid}"), "the iteration state is gone once it completed"
    end
  end

  # Every Ruby runner test, on any Sidekiq.
  module RubyRunnerSuite
    include RubyRunnerTests
    include RubyRunnerEventTests
    include RubyRunnerDecisionTests
  end

  # The same in a test world of Sidekiq 7 or later, with the 7.x/8.x cases.
  module ModernWorldSuite
    include RubyRunnerSuite
    include WorldRunner
    include Sidekiq7PlusTests
  end
end

class RubyRunnerSidekiq6Test < Minitest::Test
  parallelize_me!
  include RunnerHarness::RubyRunnerSuite

  def expected_runner = /\Akiqd-ruby-runner .* sidekiq 6\.4\.1\)\z/
end

# Sidekiq 7.3 (the sidekiq73 world: Debian's Ruby 3.1, redis-client instead of redis-rb).
class RubyRunnerSidekiq73Test < Minitest::Test
  parallelize_me!
  include RunnerHarness::ModernWorldSuite

  def world = "sidekiq73"
  def ruby_version = /3\.1\.\d+/
  def discard_runs_death_handlers? = false
end

# Sidekiq 8.1 (the sidekiq81 world: Ruby 3.3).
class RubyRunnerSidekiq81Test < Minitest::Test
  parallelize_me!
  include RunnerHarness::ModernWorldSuite

  def world = "sidekiq81"
  def ruby_version = /3\.3\.\d+/
  def discard_runs_death_handlers? = true
end

class PythonRunnerTest < Minitest::Test
  parallelize_me!
  include RunnerHarness::SharedTests

  def command = ["/usr/bin/python3", RunnerHarness::PY_RUNNER, "--path", File.join(RunnerHarness::ROOT, "tests/runners/python_app"),
                 "--import", "concurrent_jobs"]
  def app_file = File.join(RunnerHarness::ROOT, "tests/runners/python_app/concurrent_jobs.py")
  def expected_runner = /\Akiqd_runner\.py /

  def records(list)
    path = File.join(@out, list)
    File.exist?(path) ? File.readlines(path).map { |l| JSON.parse(l) } : []
  end

  def after_sigterm = assert_empty(records("finished"))

  def test_quiet_sets_stopping_and_kill_discard
    r = start_runner(threads: 1) # its only worker is busy: the watcher reads `quiet`
    r.job(1, payload("StopJob", "q"))
    wait_until("the job running") { records("started").size == 1 }
    r.send_frame("quiet", "{}")
    assert_equal ["done 1", "{}"], r.read_frame
    assert_equal [["q", records("started").first[1]]], records("stopped")
    r.job(2, payload("FailJob", "kill"))
    assert_equal "kill", JSON.parse(r.read_frame[1])["retry_in"]
    r.job(3, payload("FailJob", "discard"))
    assert_equal "discard", JSON.parse(r.read_frame[1])["retry_in"]
  end

  # A socket per seat, as kiqd gives them (a `seats` frame with the sockets attached): each job
  # goes to its seat, untagged, and is answered there, by a thread of that seat. With one worker
  # thread, two jobs at once can only be the seats'. End of file on the protocol socket ends the
  # seats once their jobs are answered.
  def test_seats_run_jobs_on_their_own_sockets
    r = start_runner(threads: 1)
    pairs = Array.new(2) { Socket.pair(:UNIX, :STREAM) }
    r.send_fds("seats", JSON.generate("count" => 2), pairs.map(&:last))
    pairs.each { |_, theirs| theirs.close }
    seats = pairs.map { |ours, _| RunnerHarness::Runner.new(ours, r.pid, r.log, own: false) }
    %w[s0 s1].each { |k| gate(k) }
    seats.each_with_index { |seat, i| seat.job(nil, payload("GateJob", "s#{i}")) }
    started = wait_until("a job running on each seat") do
      s = records("started")
      s if s.size == 2
    end
    assert_equal 2, started.map(&:last).uniq.size, "each seat's job on its own thread"
    release("s1")
    assert_equal ["done", "{}"], seats[1].read_frame
    release("s0")
    assert_equal ["done", "{}"], seats[0].read_frame
    seats[0].job(nil, payload("FailJob", "kill"))
    type, data = seats[0].read_frame
    assert_equal ["fail", "kill"], [type, JSON.parse(data)["retry_in"]]
    r.close_write
    seats.each { |seat| assert_equal :eof, seat.read_frame, "the seat ends with the protocol socket" }
    assert_equal :eof, r.read_frame
    assert_equal 0, r.wait_exit.exitstatus
  ensure
    seats&.each(&:stop)
  end
end
