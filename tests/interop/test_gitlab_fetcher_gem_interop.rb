# gitlab-sidekiq-fetcher (0.9.0 on Sidekiq 6.4.1, the sidekiq64 test world) and kiqd: an app that
# sets up the gem's reliable fetch gets reliable fetch under kiqd, and the jobs a Ruby Sidekiq
# process running the gem had in flight when it was killed run once under kiqd (the gem's
# interruption count and max_retries_after_interruption kept). The killed process's heartbeat
# (60 s) is deleted by the test rather than waited for.
require "support"
require "worlds"

class GitlabFetcherGemTest < Minitest::Test
  include KiqdInterop::Helpers

  WORLD = "sidekiq64"
  APP = File.join(__dir__, "gitlab_fetcher_app", "app.rb")
  RUNNER = File.join(KiqdInterop::ROOT, "runners", "ruby", "kiqd-ruby-runner")

  def setup
    KiqdInterop::Worlds.require!(WORLD)
    super
  end

  def push(args)
    jid = SecureRandom.hex(12)
    redis.lpush("queue:default", JSON.generate("class" => "SlowJob", "args" => args, "jid" => jid, "queue" => "default",
                                               "retry" => true, "created_at" => Time.now.to_f,
                                               "enqueued_at" => Time.now.to_f))
    jid
  end

  def kiqd(extra = {})
    start_kiqd({"concurrency" => 2, "timeout" => 5,
                "runners" => {"app" => {"command" => KiqdInterop::Worlds.ruby(WORLD, RUNNER, "--require", APP),
                                        "processes" => 1}},
                "handlers" => {"*" => {"runner" => "app"}},
                "reliable_fetch" => {"orphan_check_interval" => 1}}.merge(extra))
  end

  def test_jobs_of_a_killed_ruby_process_run_once_under_kiqd
    redis.flushall
    redis.set("slow", "1")
    jid = push([1])
    sidekiq = spawn_child("sidekiq", KiqdInterop::Worlds.sidekiq(WORLD, "-r", APP, "-c", "2", "-q", "default"))
    wait_until(60, "the Ruby process to start the job") { redis.lrange("started", 0, -1) == [jid] }
    lists = redis.keys("working:queue:default:*")
    assert_equal 1, lists.size, "the gem's working list: #{lists.inspect}"
    sidekiq.signal("KILL")
    sidekiq.wait(10)
    # Its heartbeat would expire within 60 s; the test does not wait that long.
    redis.del(redis.keys("reliable-fetcher-heartbeat-*"))
    redis.del("slow")

    server = kiqd
    wait_until(60, "kiqd to run the job") { redis.lrange("finished", 0, -1) == [jid] }
    assert_includes server.log, "gitlab-sidekiq-fetcher: the app sets up reliable fetch, so kiqd fetches reliably"
    wait_until(30, "kiqd's start line, with reliable fetch") { server.log[/starting: .* fetch=reliable/] }
    assert_equal [], redis.keys("working:queue:*"), "the gem's list is empty and gone"
    assert server.stop(30)
    assert_equal [jid, jid], redis.lrange("started", 0, -1), "started under Ruby, then once under kiqd"
    assert_equal [jid], redis.lrange("finished", 0, -1)
  end

  def test_a_job_interrupted_too_often_goes_to_the_interrupted_set
    redis.flushall
    job = {"class" => "SlowJob", "args" => [2], "jid" => "cafe" * 6, "queue" => "default", "retry" => true,
           "interrupted_count" => 2, "created_at" => 1_700_000_000.5}
    redis.lpush("working:queue:default:gone-host:4242:0123456789ab", JSON.generate(job))
    server = kiqd
    wait_until(30, "the job in the interrupted set") { redis.zcard("interrupted") == 1 }
    moved = JSON.parse(redis.zrange("interrupted", 0, -1).first)
    assert_equal 3, moved["interrupted_count"]
    assert_equal job.merge("interrupted_count" => 3), moved, "every other field as it was"
    assert_equal [], redis.keys("working:queue:*")
    assert server.stop(30)
    assert_equal [], redis.lrange("started", 0, -1), "it did not run"
  end

  def test_a_config_kiqd_cannot_fetch_reliably_with_is_a_start_up_error
    config = File.join(tmpdir, "prefetch.yml")
    File.write(config, {"queues" => ["default"], "prefetch" => 10, "redis" => {"url" => redis_url},
                        "runners" => {"app" => {"command" => KiqdInterop::Worlds.ruby(WORLD, RUNNER, "--require", APP),
                                                "processes" => 1}},
                        "handlers" => {"*" => {"runner" => "app"}}}.to_yaml)
    out, status = Open3.capture2e(KiqdInterop::KIQD_BIN, "-C", config)
    assert_equal 78, status.exitstatus, out
    assert_includes out, "fetch: the app sets up gitlab-sidekiq-fetcher's reliable fetch, and kiqd's config has prefetch: 10"
  end
end
