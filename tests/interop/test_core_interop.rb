# Core: jobs written by the real Ruby Sidekiq 6.4.1 client are run by kiqd, and what
# kiqd writes back (retry set, dead set, requeued payloads) reads correctly through the Sidekiq API
# and is picked up again by a real Ruby Sidekiq process.
require "support"

class CoreInteropTest < Minitest::Test
  include KiqdInterop::Helpers

  # 1. Sidekiq::Client.push, Worker.perform_in and Sidekiq::Client.push_bulk all reach kiqd.
  def test_immediate_scheduled_and_bulk_jobs_pushed_by_ruby_are_run
    immediate = Sidekiq::Client.push("class" => Test::Record, "args" => ["immediate", { "k" => [1, 2] }])
    scheduled_before = Test::Record.perform_in(1, "scheduled-before-start")
    bulk = Sidekiq::Client.push_bulk("class" => Test::Record,
                                     "args" => [["bulk", 0], ["bulk", 1], ["bulk", 2]])
    assert_equal 3, bulk.size
    assert_equal 1, Sidekiq::ScheduledSet.new.size, "perform_in must go to the schedule set"
    assert_equal 4, Sidekiq::Queue.new("default").size

    kiqd = start_kiqd({}, test_daemon: true)
    scheduled_after_at = Time.now.to_f + 1.5
    scheduled_after = Test::Record.perform_at(scheduled_after_at, "scheduled-after-start")

    expected = [immediate, scheduled_before, *bulk, scheduled_after]
    records, by_jid = wait_for_each_run_once(expected)
    records.each do |r|
      assert_equal "Test::Record", r["class"]
      assert_equal "default", r["queue"]
      assert_equal(-1, r["retry_count"])
      assert_equal kiqd.pid, r["pid"], "recorded by the kiqd_test_daemon we started"
    end
    assert_equal ["immediate", { "k" => [1, 2] }], by_jid[immediate].first["args"]
    assert_equal ["scheduled-before-start"], by_jid[scheduled_before].first["args"]
    assert_equal [["bulk", 0], ["bulk", 1], ["bulk", 2]], bulk.map { |j| by_jid[j].first["args"] }
    assert_operator by_jid[scheduled_after].first["started"], :>=, scheduled_after_at,
                    "a scheduled job must not run before its time"

    assert_equal 0, Sidekiq::ScheduledSet.new.size
    assert_equal 0, Sidekiq::Queue.new("default").size
    assert_equal 0, Sidekiq::RetrySet.new.size
    assert_equal 0, Sidekiq::DeadSet.new.size
  end

  # 2a. A kiqd failure is a proper Sidekiq retry entry.
  def test_failure_is_listed_by_retry_set_with_all_fields
    custom = { "tenant" => 42, "tags_x" => ["a", "b"], "note" => "keep me \u00e9" }
    jid = Sidekiq::Client.push("class" => "Kiqd::Fail", "args" => ["boom from ruby"],
                               "retry" => 3, "backtrace" => true, "x_custom" => custom)
    before = Time.now.to_f
    start_kiqd

    entry = wait_until(10, "the job in the retry set") { Sidekiq::RetrySet.new.find_job(jid) }
    assert_equal "Kiqd::Fail", entry.klass
    assert_equal "Kiqd::Fail", entry.display_class
    assert_equal ["boom from ruby"], entry.args
    assert_equal "default", entry.queue
    assert_equal "RuntimeError", entry["error_class"]
    assert_equal "boom from ruby", entry["error_message"]
    assert_equal 0, entry["retry_count"]
    assert_equal 3, entry["retry"]
    assert_equal true, entry["backtrace"]
    assert_kind_of Float, entry["failed_at"]
    assert_operator entry["failed_at"], :>=, before - 1
    assert_nil entry["retried_at"]
    bt = entry.error_backtrace
    assert_kind_of Array, bt
    refute_empty bt
    bt.each { |line| assert_kind_of String, line }
    assert_equal custom, entry["x_custom"], "unknown fields must survive the round trip"
    assert_operator entry.at, :>, Time.now, "the retry must be scheduled in the future"
    # Sidekiq 6.x: delay = retry_count**4 + 15 + rand(10) * (retry_count + 1) => 15..24 s.
    assert_operator entry.score, :<=, Time.now.to_f + 25
    assert_equal 1, Sidekiq::Stats.new.retry_size
    assert_equal 0, Sidekiq::DeadSet.new.size
  end

  # 2b. A class only Ruby knows fails in kiqd (NameError, retried); a real Ruby Sidekiq process
  #     then runs it after RetrySet#retry_all.
  def test_unknown_class_fails_in_kiqd_then_real_sidekiq_runs_it_after_retry_all
    jid = Sidekiq::Client.push("class" => "RubyOnlyJob", "args" => [7, "seven"])
    kiqd = start_kiqd

    entry = wait_until(10, "RubyOnlyJob in the retry set") { Sidekiq::RetrySet.new.find_job(jid) }
    assert_equal "NameError", entry["error_class"]
    assert_equal 0, entry["retry_count"]
    assert_equal "RubyOnlyJob", entry.klass
    assert_equal [7, "seven"], entry.args

    kiqd.signal("TERM")
    assert_exits_cleanly(kiqd, 15, "kiqd did not exit after TERM")

    Sidekiq::RetrySet.new.retry_all
    assert_equal 0, Sidekiq::RetrySet.new.size
    queued = Sidekiq::Queue.new("default").to_a
    assert_equal [jid], queued.map(&:jid)
    jobfile = write_ruby_script("ruby_only_job.rb", <<~RUBY)
      require "json"
      class RubyOnlyJob
        include Sidekiq::Worker
        def perform(n, s)
          Sidekiq.redis do |c|
            c.rpush("ruby-ran", JSON.generate("jid" => jid, "args" => [n, s], "pid" => ::Process.pid))
          end
        end
      end
    RUBY
    sidekiq = spawn_sidekiq(jobfile, 2)
    ran = wait_until(30, "the real Sidekiq to run RubyOnlyJob") do
      assert_alive(sidekiq)
      redis.lrange("ruby-ran", 0, -1).map { |s| JSON.parse(s) }.first
    end
    assert_equal jid, ran["jid"]
    assert_equal [7, "seven"], ran["args"]
    assert_equal sidekiq.pid, ran["pid"]

    sidekiq.signal("TERM")
    assert_exits_cleanly(sidekiq, 20, "sidekiq did not exit after TERM")
    assert_equal 0, Sidekiq::RetrySet.new.size
    assert_equal 0, Sidekiq::DeadSet.new.size
    assert_equal 0, Sidekiq::Queue.new("default").size
  end

  # 3. A job interrupted by a hard shutdown goes back to its queue as the original bytes.
  def test_hard_shutdown_requeues_the_byte_identical_payload
    jid = Sidekiq::Client.push("class" => "Kiqd::Sleep", "args" => [30], "x_extra" => { "z" => 1.5 })
    original = redis.lindex("queue:default", 0)
    refute_nil original

    kiqd = start_kiqd({}, args: ["-t", "1"])
    identity = kiqd.identity
    wait_for_running(kiqd, jid)
    assert_equal 0, redis.llen("queue:default"), "the job must have been fetched"

    kiqd.signal("TERM")
    assert_exits_cleanly(kiqd, 15, "kiqd did not exit within 15 s of TERM with -t 1")
    assert_equal [original], redis.lrange("queue:default", 0, -1),
                 "the queue must hold exactly the original payload string"
    refute redis.sismember("processes", identity), "identity must leave `processes`"
    assert_equal 0, redis.exists("#{identity}:workers", "#{identity}:work")
    refute(Sidekiq::ProcessSet.new.any? { |p| p.identity == identity })
    assert_equal 0, Sidekiq::RetrySet.new.size, "an interruption is not a failure"
    assert_equal 0, Sidekiq::DeadSet.new.size
    # ... but, as in Sidekiq 6.4.1 (whose stats wrapper sees Sidekiq::Shutdown), it is counted in
    # both processed and failed, flushed at exit.
    stats = Sidekiq::Stats.new
    assert_equal [1, 1], [stats.processed, stats.failed]
  end

  # 4. Unrunnable payloads go to the dead set; good jobs keep running.
  def test_invalid_payloads_go_to_the_dead_set_and_good_jobs_still_run
    redis.lpush("queue:default", "not json")
    no_class_jid = SecureRandom.hex(12)
    redis.lpush("queue:default", JSON.generate("jid" => no_class_jid, "args" => [1], "queue" => "default"))
    good = Test::Record.perform_async("after-bad")
    kiqd = start_kiqd({}, test_daemon: true)

    wait_until(10, "the good job to run") { ran_records.any? { |r| r["jid"] == good } }
    dead = wait_until(10, "two dead-set entries") do
      d = Sidekiq::DeadSet.new.to_a
      d if d.size == 2
    end

    not_json = dead.find { |e| e.args == ["not json"] }
    refute_nil not_json, "the raw string must be kept: #{dead.map(&:value).inspect}"
    assert_equal "JSON::ParserError", not_json["error_class"]
    refute_empty not_json["error_message"].to_s
    assert_match(/\A\h{24}\z/, not_json.jid)

    no_class = dead.find { |e| e.jid == no_class_jid }
    refute_nil no_class, dead.map(&:value).inspect
    assert_nil no_class.klass
    assert_equal [1], no_class.args
    refute_empty no_class["error_class"].to_s
    assert_match(/class/, no_class["error_message"])
    dead.each { |e| assert_operator e.at, :<=, Time.now }

    # Still alive and working after the bad input.
    assert kiqd.alive?
    again = Test::Record.perform_async("still-alive")
    wait_until(10, "a job pushed after the bad ones") { ran_records.any? { |r| r["jid"] == again } }
    assert_equal 0, Sidekiq::RetrySet.new.size
    assert_equal 0, Sidekiq::Queue.new("default").size
  end
end
