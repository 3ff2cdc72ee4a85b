# sidekiq-limit_fetch's queue limits hold under kiqd with the app unchanged (limit_fetch_app/,
# the gem's 4.4.1 on Sidekiq 7.3 and 8.1 from the test worlds): a limit set in Ruby at boot runs
# first under the real Sidekiq server, then under kiqd (which sees the gem through its runner and
# fetches with the gem's keys), then with one of each serving the queue together; a limit and a
# process limit given in the YAML hold under kiqd alone, and a queue paused the gem's way waits. Concurrency is measured from the jobs' own
# ledger (each job's start and end times).
require "support"
require "worlds"
require "ledger"

class LimitFetchGemTest < Minitest::Test
  include KiqdInterop::Helpers
  include KiqdInterop::LedgerReads

  APP = File.join(__dir__, "limit_fetch_app", "app.rb")
  RUNNER = File.join(KiqdInterop::ROOT, "runners", "ruby", "kiqd-ruby-runner")
  JOBS = 8

  def push_jobs
    redis.flushall
    JOBS.times do |i|
      redis.lpush("queue:imports", JSON.generate("class" => "ImportJob", "args" => [i], "jid" => SecureRandom.hex(12),
                                                 "queue" => "imports", "retry" => true,
                                                 "created_at" => Time.now.to_f, "enqueued_at" => Time.now.to_f))
    end
    redis.sadd("queues", "imports")
  end

  def sidekiq
    spawn_child("sidekiq-#{world}", KiqdInterop::Worlds.sidekiq(world, "-r", APP, "-c", "6", "-q", "imports", "-t", "5"))
  end

  def kiqd(extra = {}, name: "kiqd", env: {})
    command = KiqdInterop::Worlds.ruby(world, RUNNER, "--require", APP)
    command = ["env", *env.map { |k, v| "#{k}=#{v}" }, *command] unless env.empty?
    start_kiqd({"concurrency" => 6, "timeout" => 5, "queues" => ["imports"],
                "compat" => KiqdInterop::Worlds.major(world).to_s,
                "runners" => {"app" => {"command" => command, "processes" => 1}},
                "handlers" => {"*" => {"runner" => "app"}}}.merge(extra), name: name)
  end

  def run_all(name, servers)
    wait_until(90, "#{name} to run the #{JOBS} jobs") { ledger.size >= JOBS }
    servers.each { |s| assert s.stop(30), "#{name}: stopped" }
    assert_equal JOBS, ledger.size, "#{name}: every job ran once"
  end

  def test_a_limit_set_in_ruby
    {"Sidekiq" => -> { [sidekiq] }, "kiqd" => -> { [kiqd] },
     "Sidekiq and kiqd together" => -> { [sidekiq, kiqd(name: "kiqd-mixed")] }}.each do |name, start|
      push_jobs
      servers = start.call
      if name == "kiqd"
        wait_until(30, "kiqd to fetch with the gem's limits") do
          servers.first.log.include?("sidekiq-limit_fetch: kiqd fetches with its queue limits")
        end
      end
      run_all(name, servers)
      assert_operator most_at_once, :<=, 2, "#{name}: the queue's limit of 2"
      assert_empty redis.lrange("limit_fetch:probed:imports", 0, -1), "#{name}: every place given back"
    end
  end

  def test_limits_in_the_yaml
    push_jobs
    server = kiqd({"limits" => {"imports" => 1}}, env: {"LIMIT_IN_YAML" => "1"})
    run_all("kiqd", [server])
    assert_equal 1, most_at_once, "limits: {imports: 1}"
    assert_equal "1", redis.get("limit_fetch:limit:imports")
  end

  def test_process_limits_in_the_yaml
    push_jobs
    server = kiqd({"process_limits" => {"imports" => 1}}, env: {"LIMIT_IN_YAML" => "1"})
    run_all("kiqd", [server])
    assert_equal 1, most_at_once, "process_limits: {imports: 1}, one kiqd process"
  end

  # The gem's Sidekiq::Queue#pause is this key; kiqd takes nothing from a paused queue.
  def test_a_paused_queue_waits
    push_jobs
    redis.set("limit_fetch:pause:imports", "1")
    server = kiqd({}, env: {"LIMIT_IN_YAML" => "1"})
    wait_until(30, "kiqd to fetch with the gem's limits") do
      server.log.include?("sidekiq-limit_fetch: kiqd fetches with its queue limits")
    end
    wait_for_beats(server, 2, timeout: 40)
    assert_equal JOBS, redis.llen("queue:imports"), "nothing taken while paused"
    redis.del("limit_fetch:pause:imports")
    run_all("kiqd", [server])
  end

  # Places a process took before it died (its heartbeat gone) are freed: with the limit of 2
  # held by a dead process, the jobs would otherwise never run.
  def test_the_places_of_a_dead_process_are_freed
    push_jobs
    3.times { redis.rpush("limit_fetch:probed:imports", "dead-process-uuid") }
    redis.sadd("limit:processes", "dead-process-uuid")
    server = kiqd
    run_all("kiqd", [server])
    assert_operator most_at_once, :<=, 2
    refute_includes redis.lrange("limit_fetch:probed:imports", 0, -1), "dead-process-uuid"
    refute redis.sismember("limit:processes", "dead-process-uuid")
  end

  KiqdInterop::Worlds.per_world(self, %w[sidekiq73 sidekiq81])
end
