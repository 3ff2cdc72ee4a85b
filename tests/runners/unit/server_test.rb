# The Server (runners/ruby/lib/kiqd/runner/server.rb) in this process, on a real socketpair, with
# the Glue of the test app booted here (real Sidekiq, real Redis): job frames go to worker
# threads, each answer carries its job's tag, `quiet` is read while every worker is busy, retry
# decisions wait for `written`, and end of file lets the jobs in hand finish. Jobs wait at gates
# (UnitApp.gate) that the test opens, so overlap and order are what the jobs record.
require_relative "support"
require "securerandom"

class ServerTest < Minitest::Test
  include UnitHarness::Frames
  include UnitHarness::ServerCase

  def teardown
    @gates.each { |key| UnitApp.release(key) } unless passed?
    @ours.close unless @ours.closed?
    begin
      @server&.join(30)
    rescue Exception # rubocop:disable Lint/RescueException
      nil # what run ended with fails its own test; minitest would take an Interrupt for ^C
    end
    @theirs.close unless @theirs.closed?
  end

  # A Server with `threads` workers; returns its `ready`.
  def start(threads, decisions: false)
    type, data = start_server(threads, decisions: decisions)
    assert_equal "ready", type
    JSON.parse(data)
  end

  def say(type, data = "{}") = send_frame(@ours, type, data)
  def job(tag, payload) = say(tag ? "job #{tag}" : "job", JSON.generate(payload))
  def answer = read_frame(@ours, @buf)

  # kiqd closes its end: the jobs in hand are answered, run returns, and nothing more is sent.
  def finish
    @ours.close_write
    assert @server.join(60), "Server#run returns at end of file"
    @theirs.close
    assert_equal :eof, answer, "no frame after the last answer"
  end

  def test_ready_announces_the_threads_and_the_app
    ready = start(2)
    assert_equal [Process.pid, 2], ready.values_at("pid", "threads")
    assert_equal "kiqd-ruby-runner #{KiqdRubyRunner::VERSION} (ruby #{RUBY_VERSION}, sidekiq #{Sidekiq::VERSION})", ready["runner"]
    assert_equal 7, ready.dig("app", "max_retries")
    finish
  end

  def test_each_job_runs_on_a_worker_of_its_own_and_is_answered_by_tag_as_it_ends
    start(3)
    %w[k1 k2 k3].each { |k| gate(k) }
    %w[k1 k2 k3].each_with_index { |k, i| job(i + 1, payload("UnitGateJob", k)) }
    # No job ends before its gate opens: three started means three at once.
    UnitHarness.wait_until("three jobs running at once") { started.size == 3 }
    threads = started.map(&:last)
    assert_equal 3, threads.uniq.size, "each job on its own thread"
    refute_includes threads, @server.object_id
    [2, 3, 1].each do |tag|
      release("k#{tag}")
      assert_equal ["done #{tag}", "{}"], answer
    end
    assert_equal %w[k2 k3 k1], UnitApp.records(:finished)
    finish
  end

  def test_an_untagged_job_is_answered_untagged
    start(1)
    job(nil, payload("UnitNoopJob", 1))
    assert_equal ["done", "{}"], answer
    finish
  end

  def test_a_failure_is_answered_with_the_error_and_the_apps_retry_delay
    start(2)
    job(4, payload("UnitFailJob", "boom", jid: "f-4", retry_count: 1))
    type, data = answer
    assert_equal "fail 4", type
    fail = JSON.parse(data)
    assert_equal %w[UnitFailError boom], fail.values_at("class", "message")
    assert_match(%r{tests/runners/unit/app\.rb:\d+:in }, fail["backtrace"].first)
    assert_equal 300, fail["retry_in"], "sidekiq_retry_in for retry count 2 (after this failure)"
    assert_equal [["UnitFailError", "f-4"]], UnitApp.records(:errors), "the app's error handler saw it"
    finish
  end

  def test_exhausted_runs_the_retries_exhausted_block_and_the_death_handlers
    start(2)
    dead = payload("UnitFailJob", "boom", jid: "x-5", retry_count: 5, error_class: "UnitFailError")
    say("exhausted 5", JSON.generate({"job" => dead, "error" => {"class" => "UnitFailError", "message" => "gone"}}))
    assert_equal ["done 5", "{}"], answer
    assert_equal [%w[x-5 UnitFailError gone]], UnitApp.records(:exhausted)
    assert_equal [%w[x-5 UnitFailError]], UnitApp.records(:deaths)
    finish
  end

  # The only worker is busy: the watcher thread reads `quiet` in its place.
  def test_quiet_is_read_while_every_worker_runs_a_job
    start(1)
    gate("q1")
    job(1, payload("UnitStoppingJob", "q1"))
    UnitHarness.wait_until("the job at its gate") { started.size == 1 }
    say("quiet")
    UnitHarness.wait_until("quiet taken while the job runs") { @glue.stopping.stopping? }
    release("q1")
    assert_equal ["done 1", "{}"], answer
    # Sidekiq 7.x/8.x give each job the context an iterable job asks `stopping?`.
    assert_equal [Sidekiq::VERSION.to_i >= 7 ? true : nil], UnitApp.records(:stopping)
    finish
  end

  def test_a_job_uses_sidekiqs_redis_from_its_worker_thread
    Sidekiq::Queue.new("unit_enqueued").clear
    start(2)
    job(1, payload("UnitEnqueueJob", 42))
    assert_equal ["done 1", "{}"], answer
    assert_equal [["UnitQueuedJob", [42]]], Sidekiq::Queue.new("unit_enqueued").map { |j| [j.klass, j.args] }
    finish
  end

  # With decisions, a failure is `fail TAG` with Sidekiq's decision, and the error handlers run
  # only once kiqd answered `written TAG`: read by the failing worker itself (one thread) or by
  # the other worker, which hands it over (two threads).
  def test_a_retry_decision_waits_for_written_whoever_reads_it
    [1, 2].each do |threads|
      setup unless threads == 1
      start(threads, decisions: true)
      before = Time.now.to_f
      job(1, payload("UnitFailJob", "boom", jid: "d-#{threads}"))
      type, data = answer
      assert_equal "fail 1", type
      fail = JSON.parse(data)
      assert_equal %w[UnitFailError boom retry], fail.values_at("class", "message", "decision")
      assert_operator fail["retry_at"], :>=, before + 100, "sidekiq_retry_in's 100 s for count 0, and jitter"
      assert_empty UnitApp.records(:errors), "the error handlers wait for the write"
      say("written 1")
      assert_equal ["done 1", "{}"], answer
      assert_equal [["UnitFailError", "d-#{threads}"]], UnitApp.records(:errors)
      finish
    end
  end

  def test_end_of_file_lets_the_jobs_in_hand_finish_and_answer
    start(2)
    %w[e1 e2].each { |k| gate(k) }
    %w[e1 e2].each_with_index { |k, i| job(i + 1, payload("UnitGateJob", k)) }
    UnitHarness.wait_until("both jobs at their gates") { started.size == 2 }
    @ours.close_write
    release("e2")
    assert_equal ["done 2", "{}"], answer
    release("e1")
    assert_equal ["done 1", "{}"], answer
    assert @server.join(60), "Server#run returns once the jobs in hand are answered"
    @theirs.close
    assert_equal :eof, answer
  end

  # SIGTERM's Sidekiq::Shutdown can reach a worker thread in its ensure clause, past its rescue,
  # so that the thread ends with it. Joining that thread must not end the process's main thread:
  # run still reaches the `exit` event and returns.
  def test_a_worker_that_ended_with_an_exception_does_not_end_run
    start(1)
    ended = Thread.new do
      Thread.current.report_on_exception = false
      raise Sidekiq::Shutdown
    end
    UnitHarness.wait_until("the extra worker ended") { !ended.alive? }
    @runner_server.instance_variable_get(:@workers) << ended
    @ours.close_write
    # Sidekiq::Shutdown is an Interrupt: caught here, so that it fails this test, not the run.
    outcome = begin
      @server.join(60) ? :returned : :still_running
    rescue Exception => e # rubocop:disable Lint/RescueException
      e
    end
    assert_equal :returned, outcome, "Server#run returns at end of file"
    @theirs.close
  end
end
