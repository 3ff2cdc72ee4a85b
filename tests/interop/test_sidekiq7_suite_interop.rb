# The "7.3 suite" under `compat: auto` (the default), run once per world (sidekiq73:
# Sidekiq 7.3.10, sidekiq81: Sidekiq 8.1.7), in three configurations, one Redis each: kiqd alone
# (no Ruby server; a second kiqd plays the peer), kiqd beside a running process of the world's
# Sidekiq, and kiqd beside a running Debian 6.4.1 process (world-independent: in the sidekiq73
# run only). In each one, through the Sidekiq API of the cluster's version (the world's alone and
# beside the world's process, 6.4.1's beside 6.4.1): the client API pushing jobs kiqd runs, ProcessSet (kiqd's record has every key the Ruby process's
# has), WorkSet, RetrySet/DeadSet and their actions (retry, delete, kill), retry_queue and
# retry_for, the peer running a retry kiqd wrote, 5,000 jobs shared with the peer (each run once),
# two schedulers over 1,000 `at:` jobs (each enqueued once), the Web UI's pages, sidekiqmon, and
# Process#quiet!/stop!.
#
# The API runs in one long-lived child Ruby per configuration (the suite's own Ruby has 6.4.1
# loaded; the world's Sidekiq runs in its own process, through scripts/world), driven line by
# line over a pipe: see ApiChild.
# KIQD_SUITE_SHARED_JOBS / KIQD_SUITE_AT_JOBS change the 5,000 / 1,000 counts.
require "support"
require "sidekiq7_support"
require "set"
require "timeout"

class Sidekiq7SuiteInteropTest < Minitest::Test
  include KiqdInterop::Helpers
  include KiqdInterop::Sidekiq7Helpers

  SHARED_JOBS = Integer(ENV["KIQD_SUITE_SHARED_JOBS"] || 5000)
  AT_JOBS = Integer(ENV["KIQD_SUITE_AT_JOBS"] || 1000)

  # The fields of a process record as the world's ProcessSet reads them (`info` merged with the
  # hash's own fields), by Sidekiq major: what kiqd must write when it is alone (no Ruby process to
  # compare with). 8 adds `capsules`.
  SEVEN_KEYS = %w[beat busy concurrency embedded hostname identity labels pid queues quiet rss
                  rtt_us started_at tag version weights].freeze
  RECORD_KEYS = { 7 => SEVEN_KEYS, 8 => (SEVEN_KEYS + %w[capsules]).sort }.freeze

  # The configuration beside Debian's 6.4.1 uses no gem of the world: it runs in one world only.
  def self.runnable_methods
    world == "sidekiq73" ? super : super - %w[test_suite_beside_a_sidekiq_6_4_1_process]
  end

  def setup
    KiqdInterop::Worlds.require!(world)
    super
  end

  def teardown
    @api&.close
    super
  end

  def test_suite_alone
    run_suite(:alone)
  end

  def test_suite_beside_a_process_of_the_worlds_sidekiq
    run_suite(:modern)
  end

  def test_suite_beside_a_sidekiq_6_4_1_process
    run_suite(:six)
  end

  # SortedEntry#reschedule (6.4.1 and 7.3 alike; 8.1 too) re-serializes the entry with Ruby's JSON
  # and ZINCRBYs that string by (at - score): it moves the entry only when kiqd's bytes are
  # exactly what Ruby's JSON.generate writes for the same data. 3,000 retry entries kiqd wrote,
  # each rescheduled an hour ahead through the world's API, must stay 3,000 entries, all an hour
  # ahead. (The json gem's own float writer, 2.10 and later, writes about 1 microsecond timestamp
  # in 840 with a digit more than Float#to_s: 3,000 entries hold such a one about 97 % of the time.)
  # kiqd is stopped before the reschedule: its scheduler would otherwise move an entry that came
  # due (15 s or more after its failure, reachable on a loaded machine) between RetrySet#to_a and
  # #reschedule, and ZINCRBY would then add that entry anew, which says nothing of kiqd's bytes.
  def test_reschedule_of_retry_entries_kiqd_wrote
    @api = ApiChild.new(self, world)
    kiqd = start_kiqd({ "concurrency" => 5, "queues" => %w[kiqdonly] })
    api(<<~RUBY)
      3000.times do |i|
        Sidekiq::Client.push("class" => "Kiqd::Fail", "queue" => "kiqdonly", "args" => [i], "retry" => 5)
      end
    RUBY
    wait_until(60, "3,000 retry entries") { redis.zcard("retry") == 3000 }
    refute_nil kiqd.stop, "kiqd must stop on TERM"
    members = redis.zrange("retry", 0, -1)
    assert_equal 3000, members.size, "kiqd's stop must leave the 3,000 entries in place"
    regenerated = api("args[0].map { |m| Sidekiq.dump_json(Sidekiq.load_json(m)) }", members)
    differing = members.zip(regenerated).reject { |m, r| m == r }
    assert_empty differing, "entries whose bytes Ruby's JSON writes differently (kiqd's, Ruby's)"
    t0 = Time.now.to_f
    api("Sidekiq::RetrySet.new.to_a.each { |e| e.reschedule(Time.now.to_f + 3600) }")
    entries = redis.zrange("retry", 0, -1, with_scores: true)
    scores = entries.map(&:last)
    assert_equal 3000, scores.size, lambda {
      "reschedule must move entries, not add new ones; not moved: " +
        entries.reject { |_, sc| sc > t0 + 3000 }.inspect
    }
    assert(scores.all? { |sc| sc > t0 + 3000 }, "every entry an hour ahead: #{scores.min}")
  end

  private

  # A child Ruby with one Sidekiq's API loaded (a world's, or Debian's 6.4.1 with world nil),
  # pointed at this test's Redis. Each call sends a Ruby snippet (with `args` bound) and reads
  # back its value as JSON, so one process serves every API check of a configuration.
  class ApiChild
    def initialize(test, world)
      @test = test
      quiet = world ? "" : "require #{File.join(__dir__, "quiet_redis.rb").inspect}\n"
      script = File.join(test.tmpdir, "api-#{world || "debian"}.rb")
      File.write(script, quiet + <<~RUBY)
        require "json"
        require "sidekiq"
        require "sidekiq/api"
        Sidekiq.configure_client { |c| c.redis = { url: ENV.fetch("REDIS_URL") } }
        module Test
          class Record
            include Sidekiq::Worker
            sidekiq_options queue: "kiqdonly", retry: 3
          end
        end
        # 7.3's and 8.1's Sidekiq::Work and 6.4.1's hash, as one shape.
        def work_row(pid, tid, w)
          h = w.is_a?(Hash) ? w : { "queue" => w.queue, "payload" => w.payload }
          payload = h["payload"].is_a?(String) ? JSON.parse(h["payload"]) : h["payload"]
          [pid, tid, h["queue"], payload["jid"], payload["class"]]
        end
        def entry_of(set, jid)
          e = set.find_job(jid)
          e && e.item.merge("score" => e.score)
        end
        $stdout.sync = true
        puts "@@RPC " + JSON.generate("ok" => Sidekiq::VERSION)
        while (line = $stdin.gets)
          req = JSON.parse(line)
          begin
            b = binding
            b.local_variable_set(:args, req["args"])
            puts "@@RPC " + JSON.generate("ok" => b.eval(req["code"]))
          rescue Exception => e
            puts "@@RPC " + JSON.generate("error" => "\#{e.class}: \#{e.message}\\n" +
                                                      e.backtrace.first(8).join("\\n"))
          end
        end
      RUBY
      @log = File.join(test.tmpdir, "api-#{world || "debian"}.log")
      cmd = world ? KiqdInterop::Worlds.ruby(world, script) : [KiqdInterop::RUBY, script]
      @io = IO.popen({ "REDIS_URL" => test.redis_url }, cmd, "r+", err: @log)
      @version = read_reply("(start)")
    end

    attr_reader :version

    def call(code, *args)
      @io.puts(JSON.generate("code" => code, "args" => args))
      read_reply(code)
    end

    def close
      @io.close unless @io.closed?
    rescue StandardError
      nil
    end

    private

    def read_reply(code)
      loop do
        ready = IO.select([@io], nil, nil, 120)
        @test.flunk("the API child gave no answer in 120 s to:\n#{code}\n#{File.read(@log)}") unless ready
        line = @io.gets
        @test.flunk("the API child ended:\n#{File.read(@log)}") unless line
        next unless line.start_with?("@@RPC ")
        reply = JSON.parse(line.delete_prefix("@@RPC "))
        @test.flunk("API call failed:\n#{code}\n#{reply["error"]}") if reply.key?("error")
        return reply["ok"]
      end
    end
  end

  def api(code, *args)
    @api.call(code, *args)
  end

  # The peer's jobs for a Ruby server: Test::Record and Test::FailOnce record each run as
  # kiqd_test_daemon does (jid, class, queue, args, retry_count, pid) in `kiqd-test:ran`; the
  # scheduler polls about every second, as kiqd's does here, so both really compete.
  def ruby_peer_jobfile
    write_ruby_script("peer_jobs.rb", <<~RUBY)
      require "json"
      class CaptureJob
        def call(_worker, job, _queue)
          Thread.current[:suite_job] = job
          yield
        end
      end
      Sidekiq.configure_server do |c|
        c.server_middleware { |chain| chain.add CaptureJob }
        if c.respond_to?(:average_scheduled_poll_interval=)
          c.average_scheduled_poll_interval = 1
        else
          Sidekiq.options[:average_scheduled_poll_interval] = 1
        end
      end
      module Test
        module Recorder
          def perform(*args)
            job = Thread.current[:suite_job]
            entry = JSON.generate("jid" => jid, "class" => job["class"], "queue" => job["queue"],
                                  "args" => args, "retry_count" => job.fetch("retry_count", -1),
                                  "pid" => ::Process.pid)
            Sidekiq.redis { |c| c.rpush("kiqd-test:ran", entry) }
          end
        end
        class Record
          include Sidekiq::Worker
          include Recorder
        end
        class FailOnce
          include Sidekiq::Worker
          include Recorder
        end
      end
    RUBY
  end

  # The other process of the configuration, serving `shared` and `ruby` (kiqd serves `kiqdonly`
  # and `shared`): a Ruby Sidekiq server, or when alone a second kiqd_test_daemon.
  def start_peer(mode)
    case mode
    when :alone
      start_kiqd({ "concurrency" => 5, "queues" => %w[shared ruby] }, test_daemon: true,
                                                                     name: "kiqd-peer")
    when :modern then spawn_sidekiq_server(:world, ruby_peer_jobfile, %w[shared ruby], concurrency: 5)
    when :six then spawn_sidekiq_server(:debian, ruby_peer_jobfile, %w[shared ruby], concurrency: 5)
    end
  end

  # Waits until every jid in `jids` has a record, then asserts each ran once; returns the records
  # by jid. Reads the list incrementally (thousands of records).
  def wait_for_runs(jids, timeout)
    want = jids.to_set
    by_jid = Hash.new { |h, k| h[k] = [] }
    read = 0
    wait_until(timeout, "#{jids.size} jobs to be recorded", interval: 0.2) do
      redis.lrange("kiqd-test:ran", read, -1).each do |s|
        read += 1
        r = JSON.parse(s)
        by_jid[r["jid"]] << r if want.include?(r["jid"])
      end
      by_jid.size == want.size
    end
    jids.each { |jid| assert_equal 1, by_jid[jid].size, "jid #{jid} must run exactly once" }
    by_jid
  end

  def run_suite(mode)
    @api = ApiChild.new(self, mode == :six ? nil : world)
    assert_equal(mode == :six ? "6.4.1" : sidekiq_version, @api.version)
    peer = start_peer(mode)
    kiqd = start_kiqd({ "concurrency" => 5, "queues" => %w[kiqdonly shared] }, test_daemon: true)
    wait_for_decision(kiqd, { alone: "no other Sidekiq process in the cluster; presenting as " \
                                     "Sidekiq 6",
                              modern: beside_world_decision,
                              six: "1 Sidekiq 6 process; presenting as Sidekiq 6" }[mode])

    check_process_set(mode, kiqd, peer)
    check_client_api(kiqd)
    sleeper = check_work_set(kiqd)
    failed = check_retry_and_dead_sets(kiqd, peer)
    check_shared_jobs(kiqd, peer)
    check_two_schedulers
    check_web_ui(mode, kiqd, sleeper, failed)
    check_sidekiqmon(mode, kiqd)
    check_quiet_and_stop(kiqd, sleeper)
  end

  # ProcessSet lists both processes; kiqd's record has every field the Ruby process's has.
  def check_process_set(mode, kiqd, peer)
    procs = wait_until(15, "both processes in ProcessSet") do
      ps = api(<<~RUBY)
        Sidekiq::ProcessSet.new.map do |p|
          { "identity" => p.identity, "pid" => p["pid"], "keys" => p.instance_variable_get(:@attribs).keys.sort,
            "queues" => p["queues"], "concurrency" => p["concurrency"], "version" => p["version"],
            "weights" => p["weights"], "total" => Sidekiq::ProcessSet.new.total_concurrency }
        end
      RUBY
      ps if ps.size == 2
    end
    mine = procs.find { |p| p["identity"] == kiqd.identity }
    other = procs.find { |p| p["pid"] == peer.pid }
    refute_nil mine, procs.inspect
    refute_nil other, procs.inspect
    assert_equal %w[kiqdonly shared], mine["queues"]
    assert_equal 5, mine["concurrency"]
    assert_equal 10, mine["total"]
    assert_match(/\Akiqd-/, mine["version"])
    # The record's own `weights` (one hash per capsule, as 7.3 and 8.1 both write it).
    assert_equal [{ "kiqdonly" => 0, "shared" => 0 }], mine["weights"] unless mode == :six
    expected = mode == :alone ? RECORD_KEYS.fetch(sidekiq_major) : other["keys"]
    assert_empty expected - mine["keys"], "kiqd's record lacks fields the #{mode} peer has"
  end

  # perform_async / perform_in / perform_at / push_bulk / push / set(...) reach kiqd, which runs
  # each job once with its arguments (only kiqd serves `kiqdonly`).
  def check_client_api(kiqd)
    jids = api(<<~RUBY)
      jids = [Test::Record.perform_async("async", { "k" => [1, 2] }),
              Test::Record.perform_in(1, "in"),
              Test::Record.perform_at(Time.now.to_f + 1, "at"),
              Sidekiq::Client.push("class" => "Test::Record", "queue" => "kiqdonly", "args" => ["push"]),
              Test::Record.set(retry: 1).perform_async("set")]
      jids + Sidekiq::Client.push_bulk("class" => Test::Record, "args" => [["bulk", 0], ["bulk", 1]])
    RUBY
    assert_equal 7, jids.compact.uniq.size
    by_jid = wait_for_runs(jids, 20)
    assert_equal [["async", { "k" => [1, 2] }], ["in"], ["at"], ["push"], ["set"], ["bulk", 0],
                  ["bulk", 1]], jids.map { |j| by_jid[j].first["args"] }
    jids.each do |j|
      assert_equal kiqd.pid, by_jid[j].first["pid"]
      assert_equal "kiqdonly", by_jid[j].first["queue"]
    end
  end

  # A long job kiqd is running shows in WorkSet with its process, queue, jid and class.
  def check_work_set(kiqd)
    jid = api('Test::Record.perform_async(600, "sleeper")')
    wait_until(15, "the sleeper in WorkSet") do
      rows = api("Sidekiq::WorkSet.new.map { |pid, tid, w| work_row(pid, tid, w) }")
      rows.any? { |pid, tid, q, j, c| pid == kiqd.identity && !tid.to_s.empty? && q == "kiqdonly" && j == jid && c == "Test::Record" }
    end
    jid
  end

  # Failures kiqd writes, read and acted on through the API: retry (kiqd fails it again),
  # delete, kill; the dead set's retry and delete; retry_queue routing a retry to the peer,
  # which runs it; retry_for ending retries by time.
  def check_retry_and_dead_sets(kiqd, peer)
    jids = api(<<~RUBY)
      failing = ->(msg, **opts) { Sidekiq::Client.push({ "class" => "Kiqd::Fail", "queue" => "kiqdonly", "args" => [msg] }.merge(opts.transform_keys(&:to_s))) }
      { "r1" => failing.("r1", retry: 5), "r2" => failing.("r2", retry: 5), "r3" => failing.("r3", retry: 5),
        "d1" => failing.("d1", retry: 0), "rf" => failing.("rf", retry: 5, retry_for: 1),
        "f1" => Sidekiq::Client.push("class" => "Test::FailOnce", "queue" => "kiqdonly", "args" => ["f1"],
                                     "retry" => 2, "retry_queue" => "ruby"),
        "f2" => Sidekiq::Client.push("class" => "Test::FailOnce", "queue" => "kiqdonly", "args" => ["f2"],
                                     "retry" => 2, "retry_queue" => "ruby") }
    RUBY
    retry_jids = jids.values_at("r1", "r2", "r3", "rf", "f1", "f2")
    wait_until(20, "6 retries and 1 dead entry") do
      api("[Sidekiq::RetrySet.new.map(&:jid).sort, Sidekiq::DeadSet.new.map(&:jid)]") ==
        [retry_jids.sort, [jids["d1"]]]
    end
    r1 = api("entry_of(Sidekiq::RetrySet.new, args[0])", jids["r1"])
    assert_equal ["Kiqd::Fail", ["r1"], "kiqdonly", "RuntimeError", "r1", 0, 5],
                 r1.values_at("class", "args", "queue", "error_class", "error_message", "retry_count", "retry")
    assert_kind_of Float, r1["failed_at"]
    assert_operator r1["score"], :>, r1["failed_at"], "the retry is scheduled later"
    assert_equal "ruby", api("entry_of(Sidekiq::RetrySet.new, args[0])", jids["f1"])["queue"],
                 "retry_queue routes the retry"
    d1 = api("entry_of(Sidekiq::DeadSet.new, args[0])", jids["d1"])
    assert_equal %w[RuntimeError d1], d1.values_at("error_class", "error_message")

    # The first retry comes due 15-25 s after a failure, and kiqd runs a scheduler: an hour ahead,
    # the entries stay where the API's actions below look for them on a slow machine too.
    retry_jids.each { |jid| move_entry("retry", jid, Time.now.to_f + 3600) }

    # The API's actions.
    api("Sidekiq::RetrySet.new.find_job(args[0]).retry", jids["r1"])
    api("Sidekiq::RetrySet.new.find_job(args[0]).delete", jids["r2"])
    api("Sidekiq::RetrySet.new.find_job(args[0]).kill", jids["r3"])
    api("Sidekiq::DeadSet.new.find_job(args[0]).retry", jids["d1"])
    # The API's retry pushes retry_count - 1 (-1 here); kiqd's next failure counts it back to 0
    # and stamps retried_at, as Sidekiq's own retry does.
    r1_again = wait_until(20, "r1 failed again by kiqd") do
      api("entry_of(Sidekiq::RetrySet.new, args[0])", jids["r1"])&.then { |e| e if e.key?("retried_at") }
    end
    assert_equal 0, r1_again["retry_count"]
    # Keep r1 where the Web UI check will look for it (its next retry would come due mid-run).
    move_entry("retry", jids["r1"], Time.now.to_f + 3600)
    wait_until(20, "d1 failed again by kiqd, back in the dead set") do
      api("entry_of(Sidekiq::DeadSet.new, args[0])", jids["d1"])&.key?("retried_at")
    end
    assert_nil api("entry_of(Sidekiq::RetrySet.new, args[0])", jids["r2"])
    assert_nil api("entry_of(Sidekiq::DeadSet.new, args[0])", jids["r2"])
    assert_nil api("entry_of(Sidekiq::RetrySet.new, args[0])", jids["r3"])
    refute_nil api("entry_of(Sidekiq::DeadSet.new, args[0])", jids["r3"]), "kill moves it to the dead set"
    api("Sidekiq::DeadSet.new.find_job(args[0]).delete", jids["r3"])
    assert_nil api("entry_of(Sidekiq::DeadSet.new, args[0])", jids["r3"])

    # The peer runs the retries kiqd wrote (queue `ruby`, which only the peer serves): one retried
    # through the API (which pushes retry_count - 1) ...
    api("Sidekiq::RetrySet.new.find_job(args[0]).retry", jids["f1"])
    ran = wait_for_runs([jids["f1"]], 30)[jids["f1"]].first
    assert_equal [peer.pid, "ruby", -1, ["f1"]], ran.values_at("pid", "queue", "retry_count", "args")

    # ... and one that comes due (its score moved to now, its bytes as kiqd wrote them): a
    # scheduler (kiqd's or the peer's) moves it to `ruby` with its retry_count, and the peer runs it.
    move_entry("retry", jids["f2"], Time.now.to_f)
    ran = wait_for_runs([jids["f2"]], 30)[jids["f2"]].first
    assert_equal [peer.pid, "ruby", 0, ["f2"]], ran.values_at("pid", "queue", "retry_count", "args")

    # retry_for: 1 — once a second has passed since the first failure, the next failure is final.
    rf = api("entry_of(Sidekiq::RetrySet.new, args[0])", jids["rf"])
    wait_until(5, "a second since rf's first failure") { Time.now.to_f > rf["failed_at"] + 1.2 }
    api("Sidekiq::RetrySet.new.find_job(args[0]).retry", jids["rf"])
    wait_until(20, "rf in the dead set (retry_for elapsed)") do
      api("entry_of(Sidekiq::DeadSet.new, args[0])", jids["rf"])
    end
    assert_nil api("entry_of(Sidekiq::RetrySet.new, args[0])", jids["rf"])
    jids
  end

  # Moves the entry of `jid` in the sorted set `set` to `score`, keeping its bytes (ZADD XX).
  # Not SortedEntry#reschedule: see test_reschedule_of_retry_entries_kiqd_wrote.
  def move_entry(set, jid, score)
    member = redis.zrange(set, 0, -1).find { |m| m.include?(%("jid":"#{jid}")) }
    refute_nil member, "no #{jid} in #{set}"
    redis.zadd(set, score, member, xx: true)
  end

  # SHARED_JOBS pushed in bulk to `shared`: each runs exactly once, and both processes take part.
  def check_shared_jobs(kiqd, peer)
    jids = api(<<~RUBY, SHARED_JOBS)
      Sidekiq::Client.push_bulk("class" => "Test::Record", "queue" => "shared",
                                "args" => Array.new(args[0]) { |i| ["shared", i] })
    RUBY
    assert_equal SHARED_JOBS, jids.uniq.size
    by_jid = wait_for_runs(jids, 300)
    pids = by_jid.values.map { |rs| rs.first["pid"] }.tally
    assert_operator pids[kiqd.pid].to_i, :>, 0, "kiqd ran none of the shared jobs"
    assert_operator pids[peer.pid].to_i, :>, 0, "the peer ran none of the shared jobs"
  end

  # AT_JOBS scheduled over the next few seconds; kiqd's scheduler and the peer's both poll the
  # schedule; each job is enqueued (and so run) exactly once.
  def check_two_schedulers
    jids = api(<<~RUBY, AT_JOBS)
      now = Time.now.to_f
      Sidekiq::Client.push_bulk("class" => "Test::Record", "queue" => "shared",
                                "args" => Array.new(args[0]) { |i| ["at", i] },
                                "at" => Array.new(args[0]) { |i| now + 2 + (i % 40) * 0.1 })
    RUBY
    assert_equal AT_JOBS, jids.uniq.size
    wait_for_runs(jids, 120)
    assert_equal 0, api("Sidekiq::ScheduledSet.new.size")
    assert_equal 0, api('Sidekiq::Queue.new("shared").size')
  end

  # The Web UI of the cluster's version renders its pages, with kiqd's process and busy job and
  # the entries kiqd wrote.
  def check_web_ui(mode, kiqd, sleeper, failed)
    base = start_web_ui(mode == :six ? nil : world, name: "web-ui-#{@api.version}")
    paths = %w[/ /busy /queues /queues/kiqdonly /retries /scheduled /morgue]
    paths << "/metrics" unless mode == :six
    paths.each { |path| assert_equal "200", http_get(base + path).code, "GET #{path}" }
    busy = http_get(base + "/busy").body
    assert_includes busy, kiqd.identity
    assert_includes busy, sleeper
    { "retries" => failed["r1"], "morgue" => failed["d1"] }.each do |page, jid|
      link = http_get("#{base}/#{page}").body[%r{/#{page}/([0-9.]+-#{jid})"}, 1]
      refute_nil link, "no link to #{jid} on /#{page}"
      res = http_get("#{base}/#{page}/#{link}")
      assert_equal "200", res.code
      assert_includes res.body, "RuntimeError"
    end
  end

  def check_sidekiqmon(mode, kiqd)
    out =
      if mode == :six
        mon = spawn_child("sidekiqmon", KiqdInterop.sidekiq_command("sidekiqmon"))
        assert mon.wait(60)&.success?, mon.log
        mon.log
      else
        world_sidekiqmon
      end
    assert_includes out, kiqd.identity
    assert_includes out, "---- Processes (2) ----"
    assert_match(/Queues: kiqdonly(: 0)?, shared/, out)
    assert_includes out, "Version: kiqd-" unless mode == :six
  end

  # Process#quiet! then Process#stop! through the API: quiet stops fetching but finishes nothing
  # early; stop ends kiqd, which puts the interrupted sleeper back in its queue.
  def check_quiet_and_stop(kiqd, sleeper)
    find = "Sidekiq::ProcessSet.new.find { |p| p.identity == args[0] }"
    api("#{find}.quiet!", kiqd.identity)
    wait_until(30, "kiqd quiet in ProcessSet") { api("#{find}&.stopping?", kiqd.identity) }
    jid = api('Test::Record.perform_async("after quiet")')
    wait_for_beats(kiqd, 1, timeout: 25) # 5 s beats, 10 s beside 7 or 8
    assert kiqd.alive?, "quiet must not stop the process"
    assert_includes api('Sidekiq::Queue.new("kiqdonly").map(&:jid)'), jid, "a quiet kiqd must not fetch"
    api("#{find}.stop!", kiqd.identity)
    assert_exits_cleanly(kiqd, 30, "kiqd did not exit after stop!")
    assert_nil api(find + "&.identity", kiqd.identity)
    assert_equal [jid, sleeper].sort, api('Sidekiq::Queue.new("kiqdonly").map(&:jid)').sort
  end
end

KiqdInterop::Worlds.per_world(Sidekiq7SuiteInteropTest)
