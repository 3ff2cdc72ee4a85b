# sidekiq-cron 2.4.0 on the real Sidekiq 7.3.10 and 8.1.7 (the sidekiq73 and sidekiq81 worlds,
# with fugit 1.14.0, et-orbi 1.4.2, cronex 0.15.0 and globalid; every 2.x test runs in each) and
# sidekiq-cron 1.12.0 on Sidekiq 6.4.1 (the sidekiq64 world, fugit 1.14.0) sharing cron jobs
# with kiqd:
# * 2.x's namespaced keys: jobs created through the gem's API in two namespaces are enqueued by
#   kiqd (layout auto), `kiqd cron --json` lists both namespaces, the gem's API and its Web UI
#   tab show kiqd's runs (last enqueue time, jid history), and a natural-language line fires;
# * kiqd with `layout: v2` moves 1.x jobs into the 2.x keys as the gem's 2.x poller does;
# * the gem's own poller (2.4.0 on 7.3 and on 8.1, then 1.12.0 on 6.4.1) racing kiqd over a job
#   firing every two seconds:
#   each run is claimed once and makes one job, and no tick between the first and last run is
#   missing — nothing fires twice or never;
# * a sidekiq.yml with `:capsules:` and `:cron_schedule_file:`, beside 2.x jobs the app created,
#   runs as it is: the capsule's queue served, both schedules firing once a tick, none missing.
# The gem runs in child Ruby processes started through scripts/world; a missing world fails the
# test.
require "support"
require "open3"
require "time"

class Cron2InteropTest < Minitest::Test
  include KiqdInterop::Helpers

  # The worlds of sidekiq-cron 2.4.0 (by the tag their tests' names carry), and of 1.12.0.
  CRON2_WORLDS = { "sidekiq73" => "7_3", "sidekiq81" => "8_1" }.freeze
  CRON1 = "sidekiq64"
  VERSIONS = CRON2_WORLDS.keys.to_h { |w| [w, "2.4.0"] }.merge(CRON1 => "1.12.0").freeze

  def setup
    VERSIONS.each do |world, version|
      assert_equal version, KiqdInterop::Worlds.gem_version(world, "sidekiq-cron"), "sidekiq-cron in #{world}"
    end
    super
  end

  def gem_command(world, code)
    # redis-rb (and its deprecation warnings) exists only on Sidekiq 6.4.1.
    quiet = world == CRON1 ? "require #{File.join(__dir__, "quiet_redis.rb").inspect}\n" : ""
    prelude = quiet + <<~RUBY
      require "sidekiq"
      raise "loaded Sidekiq \#{Sidekiq::VERSION}" unless
        Sidekiq::VERSION == #{KiqdInterop::Worlds::SIDEKIQ[world].inspect}
      Sidekiq.logger.level = Logger::WARN
      require "sidekiq-cron" # the gem as an app loads it (2.x's configuration and namespaces)
      require "json"
      Sidekiq.configure_client { |c| c.redis = { url: ENV["REDIS_URL"] } }
      if defined?(Sidekiq::Cron.configure)
        Sidekiq::Cron.configure { |c| c.available_namespaces = %w[default billing] }
      end
    RUBY
    KiqdInterop::Worlds.ruby(world, "-e", prelude + code)
  end

  def gem_ruby(world, code)
    out, err, st = Open3.capture3({ "REDIS_URL" => redis_url, "TZ" => "UTC" },
                                  *gem_command(world, code))
    assert st.success?, "the gem's Ruby failed: #{err}"
    JSON.parse(out.lines.last || "null")
  end

  def cron_config(extra = {})
    { "queues" => ["elsewhere"], "cron_poll_interval" => 0.2 }.merge(extra)
  end

  def namespaces_scenario(cron2)
    created = gem_ruby(cron2, <<~RUBY)
      puts [
        Sidekiq::Cron::Job.create(name: "tick", cron: "* * * * * *", class: "Tick", queue: "ticks"),
        Sidekiq::Cron::Job.create(name: "bill", namespace: "billing", cron: "*/2 * * * * *",
                                  class: "Bill", args: [7], queue: "bills"),
        Sidekiq::Cron::Job.create(name: "nat", cron: "every 1 seconds", class: "Nat", queue: "nats"),
      ].to_json
    RUBY
    assert_equal [true, true, true], created
    assert redis.exists?("cron_jobs:billing"), "2.x keys expected"
    kiqd = start_kiqd(cron_config)
    wait_until(30, "kiqd to enqueue all three") do
      redis.llen("queue:ticks") >= 3 && redis.llen("queue:bills") >= 2 && redis.llen("queue:nats") >= 3
    end
    assert_equal ["Bill", [7]], JSON.parse(redis.lindex("queue:bills", 0)).values_at("class", "args")
    assert_match(/sidekiq-cron 2\.x layout/, kiqd.log)
    kiqd.stop

    api = gem_ruby(cron2, <<~RUBY)
      puts Sidekiq::Cron::Job.all("*").map { |j|
        [j.name, { "ns" => j.namespace, "last" => j.last_enqueue_time&.to_i,
                   "jids" => j.jid_history_from_redis.map { |h| h["jid"] } }] }.to_h.to_json
    RUBY
    assert_equal %w[bill nat tick], api.keys.sort
    assert_equal "billing", api["bill"]["ns"]
    tick_jids = redis.lrange("queue:ticks", 0, -1).map { |j| JSON.parse(j)["jid"] }
    assert_includes tick_jids, api["tick"]["jids"].first
    assert_in_delta Time.now.to_i, api["tick"]["last"], 20

    out, err, st = Open3.capture3(KiqdInterop::KIQD_BIN, "cron", "--json", "-C", kiqd.config_path)
    assert st.success?, err
    listed = JSON.parse(out).map { |j| [j["name"], [j["layout"], j["namespace"], j["last_enqueue_at"]]] }.to_h
    assert_equal({ "bill" => ["v2", "billing", api["bill"]["last"]],
                   "nat" => ["v2", "default", api["nat"]["last"]],
                   "tick" => ["v2", "default", api["tick"]["last"]] }, listed)

    # The gem's Web UI tab (2.4, on the world's Sidekiq Web) lists the jobs and shows kiqd's jids.
    pages = gem_ruby(cron2, <<~RUBY)
      require #{File.join(__dir__, "cron_web_request.rb").inspect}
      web = cron_web
      index = web.get("/cron/namespaces/default")
      show = web.get("/cron/namespaces/default/jobs/tick")
      puts({ index: index.status, tick: index.body.include?("tick"),
             show: show.status, jid: show.body.include?(#{api["tick"]["jids"].first.inspect}) }.to_json)
    RUBY
    assert_equal({ "index" => 200, "tick" => true, "show" => 200, "jid" => true }, pages)
  end

  def layout_v2_scenario(cron2)
    assert_equal true, gem_ruby(CRON1, <<~RUBY)
      puts Sidekiq::Cron::Job.create(name: "old", cron: "* * * * * *", class: "Old", queue: "olds").to_json
    RUBY
    assert redis.sismember("cron_jobs", "cron_job:old")
    kiqd = start_kiqd(cron_config("cron" => { "layout" => "v2" }))
    wait_until(30, "kiqd to enqueue the moved job") { redis.llen("queue:olds") >= 2 }
    kiqd.stop
    refute redis.sismember("cron_jobs", "cron_job:old")
    seen = gem_ruby(cron2, "puts Sidekiq::Cron::Job.all.map { |j| " \
                           "[j.name, j.last_enqueue_time&.to_i] }.to_json")
    assert_equal "old", seen.dig(0, 0)
    assert_in_delta Time.now.to_i, seen.dig(0, 1), 20
  end

  def race(world, prefix)
    assert_equal true, gem_ruby(world, <<~RUBY)
      puts Sidekiq::Cron::Job.create(name: "shared", cron: "*/2 * * * * *", class: "Shared",
                                     queue: "shared").to_json
    RUBY
    enqueue = world == CRON1 ? "test_and_enque_for_time!" : "test_and_enqueue_for_time!"
    all = world == CRON1 ? "all" : 'all("*")'
    # The gem's Poller#enqueue, in a loop, in a Ruby process of its own.
    poller = spawn_child("gem-poller", gem_command(world, <<~RUBY), env: { "TZ" => "UTC" })
      loop do
        time = Time.now.utc
        Sidekiq::Cron::Job.#{all}.each { |j| j.#{enqueue}(time) if j.valid? }
        sleep 0.1
      end
    RUBY
    kiqd = start_kiqd(cron_config)
    wait_until(40, "eight runs of the shared job") { redis.llen("queue:shared") >= 8 }
    poller.stop
    after_race = redis.llen("queue:shared")
    wait_until(30, "two more runs, kiqd's alone") { redis.llen("queue:shared") >= after_race + 2 }
    kiqd.stop
    by_kiqd = kiqd.log.scan("cron: enqueued shared").size
    assert by_kiqd.positive?, "kiqd enqueued none of the #{redis.llen("queue:shared")} runs"
    # The line fires every two seconds: with a one-second line the gem's own poller, alone,
    # enqueues every other second (Job#enqueue! records the wall-clock time as
    # last_enqueue_time, and fugit's previous_time is strictly before the current second, so
    # the next second's run counts as enqueued already); kiqd follows the same rule, so such a
    # line is no test of missed ticks.
    assert_every_tick_once(prefix, "shared")
  end

  # Each run of a two-second line claimed once and made exactly one job, none missing between
  # the first and the last (the first claim is the one the job's save writes).
  def assert_every_tick_once(prefix, queue)
    claims = redis.zrange("#{prefix}:enqueued", 0, -1).map { |t| Time.iso8601(t).to_i }.sort
    runs = claims.drop(1)
    assert_operator runs.size, :>=, 2, "#{queue}: too few runs to judge"
    assert_equal runs.size, redis.llen("queue:#{queue}"), "#{queue}: one job per claimed run"
    assert runs.all?(&:even?), "#{queue}: runs off the two-second line: #{runs.inspect}"
    assert_empty (runs.first..runs.last).step(2).to_a - runs, "#{queue}: ticks never enqueued"
  end

  # What a team brings over: Sidekiq 7's sidekiq.yml with `:capsules:` and sidekiq-cron's
  # `:cron_schedule_file:`, and sidekiq-cron 2.x jobs its app created in Redis. kiqd runs it as
  # it is: the capsule's queue is served, the file's schedule and the API's job both fire, each
  # run once, none missing.
  def existing_sidekiq_yml_scenario(cron2)
    assert_equal true, gem_ruby(cron2, <<~RUBY)
      puts Sidekiq::Cron::Job.create(name: "api_tick", cron: "*/2 * * * * *", class: "ApiTick",
                                     queue: "api_ticks").to_json
    RUBY
    schedule = File.join(tmpdir, "schedule.yml")
    File.write(schedule, <<~YAML)
      file_tick:
        cron: "*/2 * * * * *"
        class: FileTick
        queue: file_ticks
    YAML
    kiqd = start_kiqd({ ":capsules" => { ":bulk" => { ":concurrency" => 1, ":queues" => ["bulk"] } },
                        ":cron_schedule_file" => schedule, "cron_poll_interval" => 0.2 })
    redis.lpush("queue:bulk", JSON.generate("class" => "Kiqd::Noop", "args" => [],
                                            "jid" => "b0000000000000000000000b",
                                            "queue" => "bulk"))
    redis.sadd("queues", "bulk")
    wait_until(40, "four runs of each schedule and the bulk capsule's job") do
      redis.llen("queue:api_ticks") >= 4 && redis.llen("queue:file_ticks") >= 4 &&
        redis.llen("queue:bulk").zero? && redis.get("stat:processed").to_i >= 1
    end
    kiqd.stop
    assert_match(/sidekiq-cron 2\.x layout/, kiqd.log)
    assert_every_tick_once("cron_job:default:api_tick", "api_ticks")
    # The schedule file's job was written into the 2.x keys, beside the API's.
    assert_equal "schedule", redis.hget("cron_job:default:file_tick", "source")
    assert_every_tick_once("cron_job:default:file_tick", "file_ticks")
  end

  CRON2_WORLDS.each do |world, tag|
    define_method("test_sidekiq_cron_2_on_#{tag}_jobs_in_two_namespaces_fire_and_show_kiqds_runs") do
      namespaces_scenario(world)
    end

    define_method("test_layout_v2_moves_1x_jobs_as_the_2x_poller_on_#{tag}_does") do
      layout_v2_scenario(world)
    end

    define_method("test_the_2x_poller_on_#{tag}_and_kiqd_enqueue_each_run_once") do
      race(world, "cron_job:default:shared")
    end

    define_method("test_an_existing_sidekiq_yml_with_capsules_a_schedule_file_and_2x_keys_" \
                  "on_#{tag}_runs_as_it_is") do
      existing_sidekiq_yml_scenario(world)
    end
  end

  def test_the_1x_poller_on_sidekiq_6_4_and_kiqd_enqueue_each_run_once
    race(CRON1, "cron_job:shared")
  end
end
