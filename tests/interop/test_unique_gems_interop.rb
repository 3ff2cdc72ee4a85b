# kiqd against sidekiq-unique-jobs' own Ruby SERVER middleware, with the gem's real
# CLIENT middleware pushing, on both gem lines, from the worlds (scripts/world): 7.1.33 on
# Sidekiq 6.4.1 (sidekiq64), 8.1.0 on Sidekiq 7.3.10 (sidekiq73) and 8.1.0 on Sidekiq 8.1.7
# (sidekiq81, Ruby 3.3); a missing world fails its tests. Each scenario runs the same pushes
# twice in one test: once served by
# a real Ruby Sidekiq process with the gem's server middleware (the reference), once by
# kiqd_test_daemon; both leave their observations, which are compared. The jobs are gated
# (unique_gems/app.rb, Test::Gated::* in kiqd_test_daemon): they start, wait for a gate key,
# then succeed or fail, so every step is awaited, never slept through.
#
# Where kiqd differs from the gem on purpose (docs/unique-jobs.md) the test asserts each side's
# own answer: a copy that finds the run lock busy waits in kiqd (the gem drops it after ~1 s),
# and a retry whose identity is free when it arrives runs in kiqd.
require "support"
require "open3"

module UniqueGems
  APP = File.join(__dir__, "unique_gems", "app.rb")
  PUSHER = File.join(__dir__, "unique_gems", "pusher.rb")

  # world → the gem line it pins (a test name's prefix: test_<gem>_on_<sidekiq>_...)
  LINES = {
    "sidekiq64" => "7.1.33",
    "sidekiq73" => "8.1.0",
    "sidekiq81" => "8.1.0",
  }.freeze

  # The pusher child (unique_gems/pusher.rb) in `world`: one JSON request and reply per line.
  class Pusher
    def initialize(world, redis_url, log)
      env = { "REDIS_URL" => redis_url }
      @in, @out, @thread = Open3.popen2(env, *KiqdInterop::Worlds.ruby(world, PUSHER),
                                        err: [log, "a"])
      @child = KiqdInterop::Child.new("pusher", @thread.pid, log)
      ready = @out.gets or raise "the pusher in #{world} did not start: #{File.read(log)}"
      @versions = JSON.parse(ready)
      expected = { "ready" => KiqdInterop::Worlds::SIDEKIQ[world], "gem" => LINES[world] }
      raise "the pusher in #{world} loaded #{@versions}, not #{expected}" unless @versions == expected
    end
    attr_reader :versions, :child

    def request(req)
      @in.puts(req.to_json)
      reply = JSON.parse(@out.gets || raise("the pusher exited"))
      raise reply["error"] if reply["error"]
      reply
    end

    # The jid the gem's client returned, nil when it rejected the push.
    def push(type, key, gate, mode = "ok", options = {})
      request("op" => "push", "class" => "Test::Gated::#{type}", "args" => [key, gate, mode],
              "options" => options)["jid"]
    end

    def digests = request("op" => "digests")["digests"]
    def reap = request("op" => "reap")

    def close
      @in.close unless @in.closed?
      @child.wait(10) || @child.stop
    end
  end
end

class UniqueGemsInteropTest < Minitest::Test
  include KiqdInterop::Helpers

  def teardown
    @pusher&.close
    super
  end

  # --- servers ----------------------------------------------------------------------------

  def start_server(kind, world, concurrency)
    if kind == :ruby
      child = spawn_child("sidekiq-#{world}",
                          KiqdInterop::Worlds.sidekiq(world, "-r", UniqueGems::APP,
                                                      "-c", concurrency.to_s, "-q", "default", "-t", "2"))
      wait_until(30, "the Ruby Sidekiq server of #{world} to register") do
        assert_alive(child)
        redis.smembers("processes").any? { |id| id.split(":")[-2] == child.pid.to_s }
      end
      child
    else
      start_kiqd({ "concurrency" => concurrency,
                   "unique_jobs" => { "wait_interval" => 0.1, "reaper_interval" => 1 } },
                 test_daemon: true)
    end
  end

  def stop_server(server)
    server.stop(10)
    children.delete(server)
  end

  # --- observations -----------------------------------------------------------------------

  def pusher(world)
    @pusher&.close
    @pusher = UniqueGems::Pusher.new(world, redis_url, File.join(tmpdir, "pusher.log"))
  end

  def started = redis.lrange("kiqd-test:started", 0, -1)
  def done = redis.lrange("kiqd-test:done", 0, -1)
  def open_gate(gate) = redis.set("kiqd-test:gate:#{gate}", "1")

  # The keys of lock state: the digests and everything under a digest (not the gem's changelog,
  # version or reaper bookkeeping).
  def lock_keys
    redis.keys("uniquejobs:*").select do |k|
      k =~ /\Auniquejobs:[0-9a-f]{32}/ || %w[uniquejobs:digests uniquejobs:expiring_digests].include?(k)
    end.sort
  end

  def wait_for_started(jid) = wait_until(30, "job #{jid} to start") { started.include?(jid) }

  # Waits until nothing is queued, scheduled or retried, no job runs and no lock is left (the
  # gem's wake-up token on <digest>:QUEUED lives 5 s), then returns what the gem sees.
  # With `locks: false` it only waits for the work to end (the gem's state after a crash stays
  # until its reaper runs, which counts the live processes' jobs for up to a minute).
  #
  # Drained means nothing inside a server either: no job started and not done, none inside the
  # Ruby server's middleware chain (kiqd-test:entered/left, app.rb's Test::Gated::InFlight: the
  # gem holds a copy there while it waits for the run lock), and the state seen on two polls in
  # a row, so that a copy on its way from `schedule` to the queue, or fetched and not yet in the
  # chain, is not taken for the end.
  def drained_state(server, locks: true)
    drained = lambda do
      assert_alive(server)
      redis.llen("queue:default").zero? && redis.zcard("schedule").zero? &&
        redis.zcard("retry").zero? && started.size == done.size + failed_runs &&
        redis.llen("kiqd-test:entered") == redis.llen("kiqd-test:left") + killed_in_chain &&
        (!locks || lock_keys.empty?)
    end
    polls_in_a_row = 0
    wait_until(45, "the queue to drain and every lock to go") do
      polls_in_a_row = drained.call ? polls_in_a_row + 1 : 0
      polls_in_a_row == 2
    end
    { "digests" => @pusher.digests, "reaped" => @pusher.reap["reaped"], "lock_keys" => lock_keys }
  end

  def failed_runs = @failed_runs || 0

  # Jobs that entered a Ruby server's chain and never left it: the server was killed mid-run (a
  # job that fails leaves the chain with its exception).
  def killed_in_chain = @killed_in_chain || 0

  def retry_now
    wait_until(30, "the failed job in the retry set") { redis.zcard("retry") == 1 }
    member = redis.zrange("retry", 0, 0).first
    redis.zadd("retry", 0, member, xx: true)
  end

  def fresh_redis
    redis.flushall
    @failed_runs = 0
    @killed_in_chain = 0
  end

  CLEAN = { "digests" => [], "reaped" => 0, "lock_keys" => [] }.freeze

  # --- scenarios --------------------------------------------------------------------------

  # A burst of copies while one runs, one process thread: the copy that is pushed first waits
  # in the queue holding the client lock, so the gem's client rejects the rest; once the run
  # ends, that copy runs; nothing is left and a new push is accepted.
  def burst_scenario(kind, world)
    fresh_redis
    server = start_server(kind, world, 1)
    p = pusher(world)
    a = p.push("UntilAndWhileExecuting", "k", "g1")
    wait_for_started(a)
    answers = Array.new(10) { p.push("UntilAndWhileExecuting", "k", "g1") }
    open_gate("g1")
    state = drained_state(server)
    after = p.push("UntilAndWhileExecuting", "k", "g1")
    wait_until(30, "the last push to run") { done.include?(after) }
    state2 = drained_state(server)
    stop_server(server)
    { "accepted" => answers.map { |j| !j.nil? }, "runs" => done.size, "state" => state,
      "after" => !after.nil?, "state2" => state2 }
  end

  # Copies while one runs, three threads: the gem's server fetches a copy at once, frees its
  # client lock, waits ~1 s for the run lock and drops it; kiqd keeps one waiting copy, which
  # runs after the running one. Either way nothing is left behind.
  def busy_burst_scenario(kind, world)
    fresh_redis
    server = start_server(kind, world, 3)
    p = pusher(world)
    a = p.push("UntilAndWhileExecuting", "k", "g1")
    wait_for_started(a)
    accepted = []
    8.times do
      jid = p.push("UntilAndWhileExecuting", "k", "g1")
      accepted << jid if jid
      # the next push once this copy was fetched and freed its client lock
      next unless jid
      wait_until(10, "the copy to free its client lock") do
        redis.llen("queue:default").zero? && lock_keys.none? { |k| k =~ /\A[^:]+:\h{32}:LOCKED\z/ }
      end
    end
    open_gate("g1")
    state = drained_state(server)
    stop_server(server)
    { "accepted" => accepted, "ran" => done, "state" => state }
  end

  # A job fails; while it waits for its retry the gem's server holds its client lock again, so a
  # duplicate is rejected; the retry runs and frees everything.
  def retry_scenario(kind, world, type)
    fresh_redis
    server = start_server(kind, world, 1)
    p = pusher(world)
    open_gate("g")
    a = p.push(type, "k", "g", "fail")
    @failed_runs = 1
    wait_until(30, "the first attempt to fail") { redis.zcard("retry") == 1 }
    dup = p.push(type, "k", "g")
    retry_now
    state = drained_state(server)
    ran = done.map { |j| { a => "A", dup => "dup" }[j] }
    after = p.push(type, "k", "g")
    wait_until(30, "the last push to run") { done.include?(after) }
    stop_server(server)
    { "duplicate_accepted" => !dup.nil?, "ran" => ran, "state" => state }
  end

  # The retry path: A fails while B (pushed during A's run) holds the client lock; B
  # runs; C is pushed and waits in the queue; A's retry comes due while C holds the lock.
  def retry_path_scenario(kind, world)
    fresh_redis
    server = start_server(kind, world, 1)
    p = pusher(world)
    a = p.push("UntilAndWhileExecuting", "k", "g1", "fail")
    @failed_runs = 1
    wait_for_started(a)
    b = p.push("UntilAndWhileExecuting", "k", "g2")
    open_gate("g1")
    wait_until(30, "A in the retry set") { redis.zcard("retry") == 1 }
    wait_for_started(b)
    c = p.push("UntilAndWhileExecuting", "k", "g2")
    d = p.push("UntilAndWhileExecuting", "k", "g2")
    retry_now
    wait_until(30, "A's retry to leave the retry set") { redis.zcard("retry").zero? }
    open_gate("g2")
    state = drained_state(server)
    stop_server(server)
    { "pushes" => [b, c, d].map { |j| !j.nil? }, "ran" => done.map { |j| { a => "A", b => "B", c => "C" }[j] },
      "state" => state }
  end

  # on_conflict: {server: reschedule}: 10 copies pushed one after the other while one runs
  # (3 threads). Each accepted copy is awaited until the server has handled it: taken from the
  # queue, and either waiting in `schedule` holding the client lock (the gem 7.1's re-pushed
  # copy, kiqd's waiting copy) or, with no client lock held, some copy in `schedule` (the gem
  # 8.1's re-pushed copy, which skips its client). Counts the copies waiting at most.
  def reschedule_scenario(kind, world)
    fresh_redis
    server = start_server(kind, world, 3)
    p = pusher(world)
    type = "UntilAndWhileExecutingReschedule"
    a = p.push(type, "k", "g1")
    wait_for_started(a)
    answers = []
    most_waiting = 0
    10.times do
      jid = p.push(type, "k", "g1")
      answers << !jid.nil?
      wait_until(30, "copy #{jid} to be handled") { copy_handled?(jid) } if jid
      most_waiting = [most_waiting, redis.zcard("schedule") + redis.llen("queue:default")].max
    end
    open_gate("g1")
    state = drained_state(server)
    stop_server(server)
    { "accepted" => answers, "runs" => done.size, "state" => state, "most_waiting" => most_waiting }
  end

  def copy_handled?(jid)
    return false if redis.lrange("queue:default", 0, -1).any? { |j| JSON.parse(j)["jid"] == jid }

    scheduled = redis.zrange("schedule", 0, -1).map { |j| JSON.parse(j)["jid"] }
    # The client lock's holders (not the gem's :RUN lock, which the running copy holds).
    holders = lock_keys.grep(/\A[^:]+:\h{32}:LOCKED\z/).flat_map { |k| redis.hkeys(k) }
    holders.empty? ? !scheduled.empty? : holders.any? { |h| scheduled.include?(h) }
  end

  # kill -9 of the server while a job runs (lock_ttl 5): a copy pushed afterwards is accepted,
  # a new server starts; the dead run's locks go by their TTL and nothing is left.
  def kill_scenario(kind, world)
    fresh_redis
    server = start_server(kind, world, 1)
    p = pusher(world)
    a = p.push("UntilAndWhileExecuting", "k", "g1", "ok", "lock_ttl" => 5)
    wait_for_started(a)
    server.signal("KILL")
    server.wait(10)
    children.delete(server)
    @failed_runs = 1 # A started and never finishes
    @killed_in_chain = 1 if kind == :ruby
    b = p.push("UntilAndWhileExecuting", "k", "g1", "ok", "lock_ttl" => 5)
    open_gate("g1")
    server = start_server(kind, world, 1)
    state = drained_state(server, locks: kind == :kiqd)
    stop_server(server)
    { "b_accepted" => !b.nil?, "b_ran" => done.include?(b), "state" => state }
  end

  # --- tests, per world (gem line and Sidekiq) --------------------------------------------

  UniqueGems::LINES.each do |world, line|
    tag = "#{line.tr(".", "_")}_on_#{KiqdInterop::Worlds::SIDEKIQ[world].split(".").first(2).join("_")}"

    define_method("test_#{tag}_burst_while_running_matches_the_gems_server") do
      gem = burst_scenario(:ruby, world)
      kiqd = burst_scenario(:kiqd, world)
      assert_equal [true] + [false] * 9, gem["accepted"], "the gem's own server"
      assert_equal gem, kiqd
      assert_equal CLEAN, kiqd["state"]
      assert_equal 3, kiqd["runs"] # A, the first copy, the push after the drain
    end

    define_method("test_#{tag}_burst_with_free_threads_leaves_nothing_and_kiqd_loses_no_update") do
      gem = busy_burst_scenario(:ruby, world)
      kiqd = busy_burst_scenario(:kiqd, world)
      assert_equal CLEAN, gem["state"], "the gem's own server"
      assert_equal CLEAN, kiqd["state"]
      assert_equal 8, gem["accepted"].size, "the gem's server frees the client lock when fetched"
      assert_equal 8, kiqd["accepted"].size, "every copy freed its client lock when fetched"
      # kiqd: one copy waited and ran after A; the rest were duplicates of that waiting copy.
      assert_equal 2, kiqd["ran"].size, kiqd.inspect
      assert_includes kiqd["accepted"], kiqd["ran"].last
    end

    %w[UntilAndWhileExecuting UntilExecuting UntilExecuted].each do |type|
      define_method("test_#{tag}_#{type}_failure_and_retry_match_the_gems_server") do
        gem = retry_scenario(:ruby, world, type)
        kiqd = retry_scenario(:kiqd, world, type)
        assert_equal CLEAN, gem["state"], "the gem's own server"
        if type == "UntilExecuted" && line == "7.1.33"
          # 7.1 frees an until_executed lock after a failure (8.x keeps it, as kiqd does).
          # The duplicate runs first; A's retry, pushed later by the gem's scheduler through
          # the client middleware, finds the lock free again.
          assert gem["duplicate_accepted"]
          assert_equal %w[dup A], gem["ran"]
          refute kiqd["duplicate_accepted"]
          assert_equal %w[A], kiqd["ran"]
          assert_equal CLEAN, kiqd["state"]
        else
          refute gem["duplicate_accepted"], "the gem's server holds the lock during the retry"
          assert_equal gem, kiqd
        end
      end
    end

    define_method("test_#{tag}_retry_path_leaves_no_stuck_identity") do
      gem = retry_path_scenario(:ruby, world)
      kiqd = retry_path_scenario(:kiqd, world)
      assert_equal [true, true, false], gem["pushes"], "the gem's own server"
      assert_equal gem["pushes"], kiqd["pushes"]
      assert_equal CLEAN, gem["state"]
      assert_equal CLEAN, kiqd["state"]
      # The gem's scheduler pushes A's retry through the client middleware, which usually
      # rejects it (C holds the lock), so A is gone (seen run in 1 of 4 runs on 8.1.0). kiqd
      # moves it to the queue; it arrives once C freed the lock, so it always runs after C.
      assert_equal %w[B C], gem["ran"].first(2)
      assert_equal %w[B C A], kiqd["ran"]
    end

    define_method("test_#{tag}_on_conflict_reschedule_one_copy_waits_holding_the_client_lock") do
      gem = reschedule_scenario(:ruby, world)
      kiqd = reschedule_scenario(:kiqd, world)
      # kiqd: the waiting copy holds the client lock, so the gem's client rejects every later
      # push; A and the waiting copy run; nothing is left.
      assert_equal [true] + [false] * 9, kiqd["accepted"], kiqd.inspect
      assert_equal 2, kiqd["runs"]
      assert_equal 1, kiqd["most_waiting"]
      assert_equal CLEAN, kiqd["state"]
      assert_equal CLEAN, gem["state"], "the gem's own server"
      if line == "7.1.33"
        # 7.1 re-pushes the copy through its client, which takes the lock: the same answers.
        assert_equal gem.slice("accepted", "runs", "most_waiting"),
                     kiqd.slice("accepted", "runs", "most_waiting")
      else
        # 8.1 re-pushes the copy past its client (the `rescheduled` flag): the lock is free
        # again, so its client accepts the next pushes, and copies pile up in `schedule`.
        assert_operator gem["accepted"].count(true), :>, 1, gem.inspect
        assert_operator gem["most_waiting"], :>, 1, gem.inspect
        assert_operator gem["runs"], :>=, 2, gem.inspect
      end
    end

    define_method("test_#{tag}_kill_9_mid_run_leaves_nothing_behind") do
      gem = kill_scenario(:ruby, world)
      kiqd = kill_scenario(:kiqd, world)
      assert gem["b_accepted"], "the gem's own server"
      assert kiqd["b_accepted"]
      assert_equal CLEAN, kiqd["state"]
      assert kiqd["b_ran"], "kiqd: the copy pushed after the crash waits for the dead run's lock"
    end
  end
end
