# sidekiq-throttled's limits hold under kiqd with the app unchanged (throttled_app/app.rb; the
# gem's 1.5.2 on Sidekiq 7.3, 2.1.0 on 8.1, from the test worlds): each scenario runs first under
# the real Sidekiq server, then under kiqd with kiqd-ruby-runner, then with one Sidekiq process
# and one kiqd serving the same queue together. Concurrency is measured from the jobs' own
# ledger (each job's start and end times), the threshold from the gem's own admission times;
# the gem's keys and scripts are shared, so the mixed fleet keeps one limit. Throttled attempts
# count as neither processed nor failed.
require "support"
require "worlds"
require "ledger"

class ThrottledGemTest < Minitest::Test
  include KiqdInterop::Helpers
  include KiqdInterop::LedgerReads

  APP = File.join(__dir__, "throttled_app", "app.rb")
  RUNNER = File.join(KiqdInterop::ROOT, "runners", "ruby", "kiqd-ruby-runner")

  def push(klass, args)
    jid = SecureRandom.hex(12)
    redis.lpush("queue:default", JSON.generate("class" => klass, "args" => args, "jid" => jid,
                                               "queue" => "default", "retry" => true,
                                               "created_at" => Time.now.to_f, "enqueued_at" => Time.now.to_f))
    jid
  end

  def sidekiq
    spawn_child("sidekiq-#{world}", KiqdInterop::Worlds.sidekiq(world, "-r", APP, "-c", "6", "-q", "default", "-t", "5"))
  end

  def kiqd(name = "kiqd")
    start_kiqd({"concurrency" => 6, "timeout" => 5, "compat" => KiqdInterop::Worlds.major(world).to_s,
                "runners" => {"app" => {"command" => KiqdInterop::Worlds.ruby(world, RUNNER, "--require", APP),
                                        "processes" => 1}},
                "handlers" => {"*" => {"runner" => "app"}}}, name: name)
  end

  # Runs `jobs` ([class, args]) under each server in turn, from a clean Redis; yields the server's
  # name once every job has run, then stops it.
  def each_server(jobs)
    {"Sidekiq" => -> { [sidekiq] }, "kiqd" => -> { [kiqd] },
     "Sidekiq and kiqd together" => -> { [sidekiq, kiqd("kiqd-mixed")] }}.each do |name, start|
      redis.flushall
      jobs.each { |klass, args| push(klass, args) }
      servers = start.call
      wait_until(90, "#{name} to run the #{jobs.size} jobs") { redis.llen("ledger") >= jobs.size }
      yield name
      servers.each { |s| assert s.stop(30), "#{name}: stopped" }
      assert_equal jobs.size, redis.llen("ledger"), "#{name}: every job ran once"
    end
  end

  def test_concurrency_limit
    each_server(8.times.map { |i| ["ConcurrencyJob", [i]] }) do |name|
      assert_operator most_at_once("concurrency"), :<=, 2, "#{name}: concurrency limit 2"
    end
    # The last run's throttled attempts were neither processed nor failed.
    assert_equal 0, redis.get("stat:failed").to_i
  end

  # The limit is on admissions (the app records the gem's own admission times): every job that
  # ran was admitted once, and no 3 s saw more than 5 admissions. Start times are not compared:
  # they lag admissions by however long each job took to get going.
  def test_threshold_limit
    each_server(10.times.map { |i| ["ThresholdJob", [i]] }) do |name|
      admitted = redis.lrange("threshold_admissions", 0, -1).map(&:to_f).sort
      assert_equal 10, admitted.size, "#{name}: each job ran after one admission of the gem"
      most = admitted.map { |s| admitted.count { |t| t >= s && t < s + 3.0 } }.max
      assert_operator most, :<=, 5, "#{name}: at most 5 admissions in any 3 s"
    end
  end

  def test_concurrency_limit_per_tenant
    jobs = %w[a b].flat_map { |t| 3.times.map { |i| ["TenantJob", [t, i]] } }
    each_server(jobs) do |name|
      %w[a b].each { |t| assert_equal 1, most_at_once("tenant:#{t}"), "#{name}: one job of tenant #{t} at once" }
    end
  end

  def test_kiqd_counts_throttled_attempts_as_neither_processed_nor_failed
    redis.flushall
    8.times { |i| push("ConcurrencyJob", [i]) }
    server = kiqd
    wait_until(90, "kiqd to run the 8 jobs") { ledger("concurrency").size == 8 }
    server.signal("TERM")
    assert server.wait(30), "kiqd stopped"
    assert_equal 8, redis.get("stat:processed").to_i, "only the jobs that ran are processed"
    assert_equal 0, redis.get("stat:failed").to_i
  end

  KiqdInterop::Worlds.per_world(self, %w[sidekiq73 sidekiq81])
end
