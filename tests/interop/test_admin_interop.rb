# Operations: the admin command line (`kiqd stats|queues|processes|retries|dead|
# quiet|stop`) against Redis data written by the real Ruby Sidekiq 6.4.1 — its client, its
# retry/dead sets, its processes — and compared with what Sidekiq's own API reports.
require "support"
require "open3"
require "uri"
require "minitest/mock"

class AdminInteropTest < Minitest::Test
  include KiqdInterop::Helpers

  # Runs `kiqd ARGS` with REDIS_URL pointing at this test's Redis; returns [stdout, stderr, status].
  def admin(*args, env: {})
    Open3.capture3({ "REDIS_URL" => redis_url }.merge(env), KiqdInterop::KIQD_BIN, *args,
                   stdin_data: "")
  end

  # `kiqd ARGS --json`, which must succeed; returns the parsed JSON.
  def admin_json(*args)
    out, err, st = admin(*args, "--json")
    assert st.success?, "kiqd #{args.join(" ")} --json failed (#{st.exitstatus}): #{err}"
    assert_empty err
    JSON.parse(out)
  end

  # A real Ruby Sidekiq process with failing workers: RubyFail and OtherFail raise RuntimeError.
  def start_ruby_sidekiq(*extra)
    jobfile = write_ruby_script("admin_jobs.rb", <<~RUBY)
      class RubyFail
        include Sidekiq::Worker
        def perform(*args) = raise("ruby failure \#{args.inspect}")
      end
      class OtherFail
        include Sidekiq::Worker
        def perform(*) = raise("other failure")
      end
    RUBY
    sidekiq = spawn_sidekiq(jobfile, 3, *extra)
    wait_until(30, "the Ruby Sidekiq process in ProcessSet") do
      assert_alive(sidekiq)
      Sidekiq::ProcessSet.new.find { |p| p["pid"] == sidekiq.pid }
    end
    sidekiq
  end

  def test_stats_and_queues_match_the_sidekiq_api
    t0 = Time.now.to_f
    # Oldest job in `default` enqueued an hour ago (the client stamps enqueued_at with Time.now).
    Time.stub(:now, Time.at(t0 - 3600)) { Sidekiq::Client.push("class" => "Test::Record", "args" => [1]) }
    2.times { |i| Sidekiq::Client.push("class" => "Test::Record", "args" => [i + 2]) }
    Time.stub(:now, Time.at(t0 - 60)) do
      Sidekiq::Client.push("class" => "Test::Record", "queue" => "critical", "args" => [])
    end
    Sidekiq::Client.push("class" => "Test::Record", "queue" => "empty_later", "args" => [])
    redis.del("queue:empty_later") # in `queues` but empty: size 0, latency 0
    Sidekiq::Client.push("class" => "Test::Record", "args" => [], "at" => t0 + 3600)
    Sidekiq::DeadSet.new.kill(Sidekiq.dump_json("class" => "Test::Record", "args" => [],
                                                "jid" => "d" * 24, "queue" => "default"))
    redis.set("stat:processed", 1234)
    redis.set("stat:failed", 56)

    stats = admin_json("stats")
    api = Sidekiq::Stats.new
    assert_equal api.processed, stats["processed"]
    assert_equal api.failed, stats["failed"]
    assert_equal api.enqueued, stats["enqueued"]
    assert_equal 4, stats["enqueued"]
    assert_equal api.scheduled_size, stats["scheduled"]
    assert_equal api.retry_size, stats["retries"]
    assert_equal api.dead_size, stats["dead"]
    assert_equal api.processes_size, stats["processes"]
    assert_equal api.workers_size, stats["busy"]
    assert_operator stats["default_queue_latency"], :>=, 3600

    # Latency as Sidekiq's Queue#latency, measured just before and just after kiqd's.
    before = Sidekiq::Queue.all.to_h { |q| [q.name, q.latency] }
    queues = admin_json("queues")
    after = Sidekiq::Queue.all.to_h { |q| [q.name, q.latency] }
    assert_equal %w[critical default empty_later], queues.map { |q| q["name"] }
    queues.each do |q|
      assert_equal Sidekiq::Queue.new(q["name"]).size, q["size"], q["name"]
      assert_operator q["latency"], :>=, before[q["name"]], q["name"]
      assert_operator q["latency"], :<=, after[q["name"]], q["name"]
    end
    assert_equal 0, queues.last["latency"]

    out, err, st = admin("queues")
    assert st.success?, err
    # Text output starts with the Redis it read (here: REDIS_URL), then the table.
    assert_equal "Redis 127.0.0.1:#{URI(redis_url).port}/0 (REDIS_URL)\n", out.lines[0]
    assert_match(/^QUEUE\s+SIZE\s+LATENCY$/, out.lines[1])
    assert_match(/^default\s+3\s+36\d\d\.\d\d s$/, out)
    out, _, st = admin("stats")
    assert st.success?
    assert_match(/^processed\s+1234$/, out)

    # Admin commands read -C like the daemon, and need no `queues:` in it.
    cfg = File.join(tmpdir, "admin.yml")
    File.write(cfg, { "redis" => { "url" => redis_url } }.to_yaml)
    out, err, st = admin("stats", "-C", cfg, "--json", env: { "REDIS_URL" => "redis://127.0.0.1:1/0" })
    assert st.success?, err
    assert_equal 1234, JSON.parse(out)["processed"]

    # Redis unreachable: one line on stderr, exit 69.
    out, err, st = admin("stats", env: { "REDIS_URL" => "redis://127.0.0.1:#{TestRedis.free_port}/0" })
    assert_equal 69, st.exitstatus
    assert_empty out
    assert_equal 1, err.lines.size, err
    assert_match(/^kiqd: stats: cannot connect to Redis .*127\.0\.0\.1:\d+/, err)
  end

  def test_retries_and_dead_written_by_ruby_sidekiq
    sidekiq = start_ruby_sidekiq
    retry_jids = 3.times.map { |i| Sidekiq::Client.push("class" => "RubyFail", "args" => [i], "retry" => 5) }
    other_jid = Sidekiq::Client.push("class" => "OtherFail", "args" => [], "retry" => 5)
    dead_jids = 2.times.map { |i| Sidekiq::Client.push("class" => "RubyFail", "args" => [10 + i], "retry" => 0) }
    wait_until(30, "4 retries and 2 dead entries written by Ruby Sidekiq") do
      Sidekiq::RetrySet.new.size == 4 && Sidekiq::DeadSet.new.size == 2
    end
    sidekiq.signal("TERM") # so that nothing runs the jobs we put back
    assert sidekiq.wait(20), "sidekiq did not stop"

    listed = admin_json("retries")
    assert_equal Sidekiq::RetrySet.new.map(&:jid).sort, listed.map { |e| e["jid"] }.sort
    listed.each do |e|
      api = Sidekiq::RetrySet.new.find_job(e["jid"])
      assert_equal api.display_class, e["class"]
      assert_equal "default", e["queue"]
      assert_equal 0, e["retry_count"]
      assert_equal "RuntimeError", e["error_class"]
      assert_equal api["error_message"], e["error_message"]
      assert_in_delta api.score, e["score"], 1e-3
    end
    assert_equal [other_jid], admin_json("retries", "--class", "OtherFail").map { |e| e["jid"] }
    out, _, st = admin("retries")
    assert st.success?
    assert_match(/^JID\s+CLASS\s+QUEUE\s+RETRIES\s+NEXT RETRY\s+ERROR$/, out.lines[1])
    assert_includes out, "RuntimeError: ruby failure [0]"

    # `retry` is SortedEntry#retry: the same payload as Ruby's (retry_count − 1, fresh
    # enqueued_at), removed from the set, pushed to its queue once.
    ruby_entry = Sidekiq::RetrySet.new.find_job(retry_jids[0])
    ruby_entry.retry
    ruby_pushed = Sidekiq.load_json(redis.lindex("queue:default", 0))
    out, err, st = admin("retries", "retry", retry_jids[1])
    assert st.success?, err
    assert_match(/retried 1 of 1/, out)
    kiqd_pushed = Sidekiq.load_json(redis.lindex("queue:default", 0))
    assert_equal retry_jids[1], kiqd_pushed["jid"]
    assert_equal ruby_pushed.keys.sort, kiqd_pushed.keys.sort
    assert_equal(-1, kiqd_pushed["retry_count"])
    assert_equal ruby_pushed["retry_count"], kiqd_pushed["retry_count"]
    %w[class queue retry error_class failed_at created_at].each do |k|
      assert_equal ruby_pushed[k].class, kiqd_pushed[k].class, k
    end
    assert_operator kiqd_pushed["enqueued_at"], :>, kiqd_pushed["failed_at"]
    assert_nil Sidekiq::RetrySet.new.find_job(retry_jids[1])
    assert_equal 2, Sidekiq::Queue.new("default").size
    assert_includes redis.smembers("queues"), "default"

    # A JID that is not there: one line, exit 1, nothing changed.
    out, err, st = admin("retries", "retry", "nosuchjid")
    assert_equal 1, st.exitstatus
    assert_match(/^kiqd: retries: no entry with jid nosuchjid in the retry set$/, err)
    assert_equal 2, Sidekiq::RetrySet.new.size
    # retry/delete without a target refuses to act on everything by accident.
    _, err, st = admin("retries", "delete")
    assert_equal 1, st.exitstatus
    assert_match(/--all/, err)

    assert_equal({ "action" => "retry", "set" => "retry", "matched" => 1, "retried" => 1, "skipped" => 0 },
                 admin_json("retries", "retry", "--class", "OtherFail"))
    assert_equal [other_jid], Sidekiq::Queue.new("default").map(&:jid).first(1)
    assert_equal({ "action" => "delete", "set" => "retry", "matched" => 1, "deleted" => 1, "skipped" => 0 },
                 admin_json("retries", "delete", retry_jids[2]))
    assert_equal 0, Sidekiq::RetrySet.new.size

    # The dead set written by Ruby's retries_exhausted.
    dead = admin_json("dead")
    assert_equal dead_jids.sort, dead.map { |e| e["jid"] }.sort
    assert_equal Sidekiq::DeadSet.new.map(&:jid), dead.map { |e| e["jid"] }, "newest first, as the Morgue"
    assert_equal 1, admin_json("dead", "--limit", "1").size
    out, err, st = admin("dead", "retry", "--all")
    assert st.success?, err
    assert_match(/retried 2 of 2 matching dead entries/, out)
    assert_equal 0, Sidekiq::DeadSet.new.size
    assert_equal 5, Sidekiq::Queue.new("default").size
    queued = Sidekiq::Queue.new("default").map(&:jid)
    assert_equal queued.uniq, queued, "no job pushed twice"
    assert_equal (retry_jids.first(2) + [other_jid] + dead_jids).sort, queued.sort
  end

  def test_processes_quiet_and_stop_act_on_ruby_sidekiq_and_kiqd
    sidekiq = start_ruby_sidekiq("-g", "ruby-tag")
    kiqd = start_kiqd({ "concurrency" => 4, "tag" => "kiqd-tag" })
    ruby_id = Sidekiq::ProcessSet.new.find { |p| p["pid"] == sidekiq.pid }.identity

    procs = admin_json("processes")
    assert_equal [kiqd.identity, ruby_id].sort, procs.map { |p| p["identity"] }
    Sidekiq::ProcessSet.new.each do |api|
      p = procs.find { |x| x["identity"] == api.identity }
      assert_equal api["pid"], p["pid"]
      assert_equal api["tag"], p["tag"]
      assert_equal api["concurrency"], p["concurrency"]
      assert_equal api["queues"], p["queues"]
      assert_equal false, p["quiet"]
      assert_operator p["rss_kb"], :>, 0
      assert_operator p["beat"], :>, 1.7e9
    end
    out, _, st = admin("processes")
    assert st.success?
    assert_match(/^IDENTITY\s+TAG\s+BUSY\s+RSS\s+LAST BEAT\s+QUIET\s+QUEUES\s+STARTED$/, out.lines[1])
    assert_match(/^#{Regexp.escape(ruby_id)}\s+ruby-tag\s+0\/3\s/, out)
    assert_match(/^#{Regexp.escape(kiqd.identity)}\s+kiqd-tag\s+0\/4\s/, out)

    # An unknown identity: one line, exit 1, no signal list created.
    out, err, st = admin("quiet", "nohost:1:000000000000")
    assert_equal 1, st.exitstatus
    assert_empty out
    assert_equal "kiqd: quiet: no live process with identity nohost:1:000000000000\n", err
    assert_equal 0, redis.exists("nohost:1:000000000000-signals")

    # quiet on the Ruby process: the TSTP it pops at its next heartbeat, as Process#quiet!.
    out, err, st = admin("quiet", ruby_id)
    assert st.success?, err
    assert_equal "quiet: sent TSTP to #{ruby_id}\n", out.lines.last
    wait_until(15, "the Ruby process to be quiet") do
      Sidekiq::ProcessSet.new.find { |p| p.identity == ruby_id }&.stopping?
    end
    assert sidekiq.alive?
    refute process_for(kiqd).stopping?
    assert_equal [false, true], admin_json("processes").sort_by { |p| p["identity"] == ruby_id ? 1 : 0 }
                                                        .map { |p| p["quiet"] }

    # stop --all: both processes get TERM through their -signals lists and exit cleanly.
    stopped = admin_json("stop", "--all")
    assert_equal "TERM", stopped["signal"]
    assert_equal [kiqd.identity, ruby_id].sort, stopped["identities"].sort
    assert_exits_cleanly(sidekiq, 30, "the Ruby Sidekiq process did not stop")
    assert_exits_cleanly(kiqd, 30, "kiqd did not stop")
    wait_until(10, "no processes left") { admin_json("processes").empty? }
  end
end
