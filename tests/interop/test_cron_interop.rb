# cron jobs: the real sidekiq-cron 1.12.0 (with fugit 1.14.0 and et-orbi 1.4.2, on
# Sidekiq 6.4.1: the sidekiq64 world, tests/gemfiles/sidekiq64.gemfile) and kiqd share cron
# jobs. Jobs created and disabled through the gem's API are enqueued (and stop being enqueued) by
# kiqd; the gem's Job.all lists kiqd's YAML schedules; the
# gem's own poller and kiqd's racing over one job enqueue each run once; `kiqd cron --json` agrees
# with Job.all on status and last enqueue time; the gem's Web UI tab shows kiqd's schedules and
# jids. The gem runs in child Ruby processes started through scripts/world, so that its world
# stays out of this suite's process; a missing world fails the test.
require "support"
require "open3"

class CronInteropTest < Minitest::Test
  include KiqdInterop::Helpers

  WORLD = "sidekiq64"

  def setup
    assert_equal "1.12.0", KiqdInterop::Worlds.gem_version(WORLD, "sidekiq-cron")
    super
  end

  def gem_command(code)
    prelude = <<~RUBY
      require #{File.join(__dir__, "quiet_redis.rb").inspect}
      require "sidekiq"
      raise "loaded Sidekiq \#{Sidekiq::VERSION}" unless Sidekiq::VERSION == "6.4.1"
      Sidekiq.logger.level = Logger::WARN
      require "sidekiq/cron/job"
      require "json"
      Sidekiq.configure_client { |c| c.redis = { url: ENV["REDIS_URL"] } }
    RUBY
    KiqdInterop::Worlds.ruby(WORLD, "-e", prelude + code)
  end

  # Runs `code` with the gem loaded against this test's Redis; returns the JSON it prints last.
  def gem_ruby(code)
    out, err, st = Open3.capture3({ "REDIS_URL" => redis_url, "TZ" => "UTC" },
                                  *gem_command(code))
    assert st.success?, "the gem's Ruby failed: #{err}"
    JSON.parse(out.lines.last || "null")
  end

  def kiqd_cron_json(kiqd)
    out, err, st = Open3.capture3(KiqdInterop::KIQD_BIN, "cron", "--json", "-C", kiqd.config_path)
    assert st.success?, "kiqd cron failed: #{err}"
    JSON.parse(out)
  end

  def cron_config(extra = {})
    { "queues" => ["elsewhere"], "cron_poll_interval" => 0.2 }.merge(extra)
  end

  def test_jobs_created_and_disabled_through_the_gem_are_enqueued_by_kiqd
    created = gem_ruby(<<~RUBY)
      ok = [
        Sidekiq::Cron::Job.create(name: "gem_tick", cron: "* * * * * *", class: "GemTick",
                                  args: [1, "a"], queue: "ticks"),
        Sidekiq::Cron::Job.create(name: "gem_mark", cron: "* * * * * *", class: "GemMark",
                                  queue: "marks"),
      ]
      puts ok.to_json
    RUBY
    assert_equal [true, true], created
    kiqd = start_kiqd(cron_config("cron" => [{ "name" => "yaml_yearly", "cron" => "0 0 1 1 * UTC",
                                               "class" => "Yearly", "queue" => "yearly" }]))
    wait_until(30, "kiqd to enqueue gem_tick") { redis.llen("queue:ticks") >= 3 }
    job = JSON.parse(redis.lindex("queue:ticks", 0))
    assert_equal ["GemTick", [1, "a"], "ticks"], job.values_at("class", "args", "queue")

    # The gem's API sees kiqd's enqueues and kiqd's YAML schedule.
    seen = gem_ruby(<<~RUBY)
      puts Sidekiq::Cron::Job.all.map { |j|
        { name: j.name, status: j.status, source: j.source,
          last: j.last_enqueue_time&.to_i } }.sort_by { |h| h[:name] }.to_json
    RUBY
    assert_equal %w[gem_mark gem_tick yaml_yearly], seen.map { |j| j["name"] }
    tick = seen.find { |j| j["name"] == "gem_tick" }
    assert_in_delta Time.now.to_i, tick["last"], 15
    assert_equal "schedule", seen.find { |j| j["name"] == "yaml_yearly" }["source"]

    # Disabled through the gem: no enqueue after disable! returned, while the other job goes on.
    gem_ruby('Sidekiq::Cron::Job.find("gem_tick").disable!; puts true.to_json')
    ticks = redis.llen("queue:ticks")
    marks = redis.llen("queue:marks")
    wait_until(30, "three more runs of gem_mark") { redis.llen("queue:marks") >= marks + 3 }
    assert_equal ticks, redis.llen("queue:ticks")
    # One job per claim of the gem's enqueued set (the first claim is written with the job).
    assert_equal redis.zcard("cron_job:gem_tick:enqueued") - 1, redis.llen("queue:ticks")

    # `kiqd cron --json` agrees with Sidekiq::Cron::Job.all (kiqd stopped, so nothing moves).
    kiqd.stop
    api = gem_ruby(<<~RUBY)
      puts Sidekiq::Cron::Job.all.map { |j|
        [j.name, { "status" => j.status, "last" => j.last_enqueue_time&.to_i }] }.to_h.to_json
    RUBY
    listed = kiqd_cron_json(kiqd).map do |j|
      [j["name"], { "status" => j["status"], "last" => j["last_enqueue_at"] }]
    end.to_h
    assert_equal api, listed
    assert_equal "disabled", listed["gem_tick"]["status"]

    # The gem's Web UI tab renders kiqd's YAML schedule, and a job's page the jids kiqd enqueued.
    jid = JSON.parse(redis.lindex("queue:ticks", 0))["jid"]
    pages = gem_ruby(<<~RUBY)
      require #{File.join(__dir__, "cron_web_request.rb").inspect}
      web = cron_web
      index = web.get("/cron")
      show = web.get("/cron/gem_tick")
      puts({ index: index.status, yaml: index.body.include?("yaml_yearly"),
             show: show.status, jid: show.body.include?(#{jid.inspect}) }.to_json)
    RUBY
    assert_equal({ "index" => 200, "yaml" => true, "show" => 200, "jid" => true }, pages)
  end

  def test_the_gems_poller_and_kiqd_enqueue_each_run_once
    assert_equal true, gem_ruby(<<~RUBY)
      puts Sidekiq::Cron::Job.create(name: "shared", cron: "* * * * * *", class: "Shared",
                                     queue: "shared").to_json
    RUBY
    # The gem's Poller#enqueue, in a loop, in a Ruby process of its own.
    poller = spawn_child("gem-poller", gem_command(<<~RUBY), env: { "TZ" => "UTC" })
      loop do
        time = Time.now.utc
        Sidekiq::Cron::Job.all.each { |j| j.test_and_enque_for_time!(time) if j.valid? }
        sleep 0.1
      end
    RUBY
    kiqd = start_kiqd(cron_config)
    wait_until(30, "ten runs of the shared job") { redis.llen("queue:shared") >= 10 }
    # With the gem's poller gone, kiqd alone must go on enqueueing: the race above would pass
    # just as well if kiqd never enqueued anything.
    poller.stop
    after_race = redis.llen("queue:shared")
    wait_until(30, "two more runs, kiqd's alone") { redis.llen("queue:shared") >= after_race + 2 }
    kiqd.stop
    enqueued = redis.llen("queue:shared")
    by_kiqd = kiqd.log.scan("cron: enqueued shared").size
    # Every claim of a run in the gem's set made exactly one job, whoever claimed it.
    assert_equal redis.zcard("cron_job:shared:enqueued") - 1, enqueued,
                 "kiqd enqueued #{by_kiqd}, the gem's poller #{enqueued - by_kiqd}"
    assert by_kiqd > 0, "kiqd enqueued none of the #{enqueued} runs"
  end
end
