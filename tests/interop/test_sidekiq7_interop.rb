# kiqd beside the real Sidekiq 7.3.10 or 8.1.7 (the test's world: sidekiq73 or sidekiq81) and
# Debian's 6.4.1 under `compat: auto` (the default): the decision it logs (alone, with a 6.4.1
# process, with a process of the world's Sidekiq, and as they come and go), the process record
# each version's ProcessSet and sidekiqmon read, and the execution metrics, which the world's own
# Sidekiq::Metrics::Query and Web UI Metrics page must report exactly. This suite's Ruby process
# has 6.4.1 loaded, so the world's Sidekiq runs in children started through scripts/world; each
# test runs once per world (Sidekiq7InteropTest::Sidekiq73, ::Sidekiq81).
require "support"
require "sidekiq7_support"

class Sidekiq7InteropTest < Minitest::Test
  include KiqdInterop::Helpers
  include KiqdInterop::Sidekiq7Helpers

  def setup
    KiqdInterop::Worlds.require!(world)
    super
  end

  # A real process of the world's Sidekiq serving only the queue `other` (so kiqd runs every job
  # here).
  def spawn_world_sidekiq
    jobfile = File.join(tmpdir, "jobs-#{world}.rb")
    File.write(jobfile, "class OtherModern; include Sidekiq::Job; def perform; end; end\n")
    spawn_sidekiq_server(:world, jobfile, ["other"])
  end

  # A real Sidekiq 6.4.1 process (Debian's) serving only the queue `other`.
  def spawn_sidekiq6
    jobfile = File.join(tmpdir, "jobs6.rb")
    File.write(jobfile, "class Other6; include Sidekiq::Worker; def perform; end; end\n")
    spawn_sidekiq_server(:debian, jobfile, ["other"])
  end

  # What the world's ProcessSet reads for kiqd.
  def world_process(identity)
    sidekiq_json("processes.rb", <<~RUBY, identity)
      p = Sidekiq::ProcessSet.new.find { |x| x.identity == ARGV[0] }
      puts JSON.generate(p && { "queues" => p.queues, "weights" => p.weights,
                                "capsules" => p["capsules"],
                                "version" => p.version, "embedded" => p.embedded?,
                                "concurrency" => p["concurrency"], "busy" => p["busy"],
                                "total_concurrency" => Sidekiq::ProcessSet.new.total_concurrency })
    RUBY
  end

  # Alone, kiqd presents itself as 6, yet writes what 7's and 8's tools read; 6.4.1's and the
  # world's ProcessSet and sidekiqmon show it, with its weights, and the world's Web UI Metrics
  # page shows its jobs (it writes the metrics of 7 and 8 both: the Web UI may be either).
  def test_auto_alone_renders_in_6_and_the_worlds_sidekiq
    kiqd = start_kiqd({ "concurrency" => 3, "queues" => [["critical", 3], ["default", 1]] })
    wait_for_decision(kiqd, "no other Sidekiq process in the cluster; presenting as Sidekiq 6 " \
                            "(execution metrics in the layouts of 7 and 8)")
    info = JSON.parse(redis.hget(kiqd.identity, "info"))
    assert_equal [{ "critical" => 3, "default" => 1 }], info["weights"]
    assert_match(/\Akiqd-/, info["version"])
    assert_equal false, info["embedded"]
    capsules = { "default" => { "concurrency" => 3, "mode" => "weighted",
                                "weights" => { "critical" => 3, "default" => 1 } } }
    assert_equal capsules, info["capsules"]
    assert_equal "3", redis.hget(kiqd.identity, "concurrency")

    p6 = wait_until(10, "kiqd in 6.4.1's ProcessSet") { process_for(kiqd) }
    assert_equal %w[critical default], p6.queues
    assert_equal 3, p6["concurrency"]
    mon6 = spawn_child("sidekiqmon", KiqdInterop.sidekiq_command("sidekiqmon"))
    assert mon6.wait(30)&.success?, mon6.log
    assert_includes mon6.log, kiqd.identity
    assert_match(/Queues: critical, default/, mon6.log)

    pw = world_process(kiqd.identity)
    refute_nil pw, "#{sidekiq_version}'s ProcessSet does not list kiqd"
    assert_equal %w[critical default], pw["queues"]
    if sidekiq_major == 7
      assert_equal [{ "critical" => 3, "default" => 1 }], pw["weights"]
    else
      # 8.x reads queues and weights from `capsules` (Process#weights: one hash, merged).
      assert_equal capsules, pw["capsules"]
      assert_equal({ "critical" => 3, "default" => 1 }, pw["weights"])
    end
    assert_equal info["version"], pw["version"]
    assert_equal false, pw["embedded"]
    assert_equal 3, pw["total_concurrency"]
    mon = world_sidekiqmon
    assert_includes mon, kiqd.identity
    # 7.3 prints `weights` (queue: weight), 8.1 each capsule's queue names.
    assert_includes mon, sidekiq_major == 7 ? "Queues: critical: 3, default: 1" : "Queues: critical, default"
    assert_includes mon, "Threads: 3 (0 busy)"
    assert_includes mon, "Version: #{info["version"]}"
    refute_match(/Unknown/, mon)

    # Jobs run, and the world's Metrics::Query (what the Metrics page reads) and Web UI show them.
    3.times { Sidekiq::Client.push("class" => "Kiqd::Noop", "args" => []) }
    wait_until(15, "3 jobs processed") { Sidekiq::Stats.new.processed == 3 }
    assert_equal({ "Kiqd::Noop" => 3 }, wait_for_query_runs(3))
    web_metrics_page(["Kiqd::Noop"])
  end

  # With a 6.4.1 process the decision stays 6; it is logged once; the metrics of 7 and 8 are
  # written (a 6.4.1 process writes none, and the Web UI may be newer than the processes): the
  # world's Query reads them.
  def test_auto_with_a_sidekiq_6_process
    six = spawn_sidekiq6
    kiqd = start_kiqd
    wait_for_decision(kiqd, "1 Sidekiq 6 process; presenting as Sidekiq 6 (execution metrics " \
                            "in the layouts of 7 and 8)")
    p6 = wait_until(10, "kiqd in 6.4.1's ProcessSet") { process_for(kiqd) }
    assert_equal ["default"], p6.queues
    2.times { Sidekiq::Client.push("class" => "Kiqd::Noop", "args" => []) }
    wait_until(15, "2 jobs processed") { Sidekiq::Stats.new.processed == 2 }
    assert_equal({ "Kiqd::Noop" => 2 }, wait_for_query_runs(2))
    assert_equal 1, decision_lines(kiqd).size, "an unchanged decision is logged once"
    six.stop
  end

  # With a process of the world's Sidekiq (7.3 or 8.1) kiqd presents as that major and writes
  # that major's metrics, which the world's Query reports exactly; when that process leaves, kiqd
  # goes back to 6, and forth again when one comes.
  def test_auto_beside_the_worlds_sidekiq_metrics_are_exact
    modern = spawn_world_sidekiq
    kiqd = start_kiqd({ "concurrency" => 3 })
    wait_for_decision(kiqd, "#{beside_world_decision} (execution metrics in the layout of " \
                            "#{sidekiq_major})")
    jids = 4.times.map { Sidekiq::Client.push("class" => "Kiqd::Noop", "args" => []) }
    jids += 3.times.map { Sidekiq::Client.push("class" => "Kiqd::Sleep", "args" => [0.05]) }
    jids += 2.times.map do |i|
      Sidekiq::Client.push("class" => "Kiqd::Fail", "args" => ["m#{i}"], "retry" => false)
    end
    lines = wait_until(20, "9 jobs done or failed") do
      l = kiqd.log.lines.grep(/ (done|fail): [0-9.]+ ms/)
      l if l.size == 9
    end
    # What kiqd timed, as it logged it: the metrics hold each successful run's whole ms.
    expected = Hash.new { |h, k| h[k] = { "p" => 0, "f" => 0, "ms" => 0, "hist" => [0] * 26 } }
    bounds = [20, 30, 45, 65, 100, 150, 225, 335, 500, 750, 1100, 1700, 2500, 3800, 5750, 8500,
              13_000, 20_000, 30_000, 45_000, 65_000, 100_000, 150_000, 225_000, 335_000, 1e20]
    lines.each do |l|
      klass = l[/class=(\S+)/, 1]
      e = expected[klass]
      e["p"] += 1
      if l.include?(" fail: ")
        e["f"] += 1
      else
        ms = l[/ done: ([0-9.]+) ms/, 1].to_f.floor
        e["ms"] += ms
        e["hist"][bounds.index { |b| ms < b }] += 1
      end
    end
    assert_equal 3, expected["Kiqd::Sleep"]["p"]
    assert_operator expected["Kiqd::Sleep"]["ms"], :>=, 150, "three sleeps of 50 ms"

    got = wait_until(25, "#{sidekiq_version}'s Metrics::Query to report 9 runs") do
      r = sidekiq_json("query.rb", <<~RUBY, *expected.keys)
        require "sidekiq/metrics/query"
        q = Sidekiq::Metrics::Query.new
        out = { "top" => q.top_jobs(minutes: 60).job_results.transform_values(&:totals) }
        ARGV.each do |k|
          jr = q.for_job(k, minutes: 60).job_results[k]
          # Each minute's histogram comes slowest first; summed over the hour, fastest first.
          out[k] = jr.hist.values.transpose.map(&:sum).reverse
        end
        puts JSON.generate(out)
      RUBY
      r if r["top"].values.sum { |t| t["p"].to_i } >= 9
    end
    expected.each do |klass, e|
      totals = got["top"][klass]
      refute_nil totals, "Query has no #{klass}: #{got.inspect}"
      assert_equal e["p"], totals["p"].to_i, "#{klass} runs"
      assert_equal e["f"], totals["f"].to_i, "#{klass} failures"
      assert_equal e["ms"], totals["ms"].to_i, "#{klass} ms"
      assert_equal e["hist"], got[klass], "#{klass} histogram"
    end
    assert_equal expected.keys.sort, got["top"].keys.sort

    web_metrics_page(expected.keys)

    # The world's process leaves: back to 6 (logged once), and to 7 or 8 again when another comes.
    modern.stop
    wait_for_decision(kiqd, "no other Sidekiq process in the cluster; presenting as Sidekiq 6")
    spawn_world_sidekiq
    wait_for_decision(kiqd, beside_world_decision)
    assert_equal 3, decision_lines(kiqd).size, decision_lines(kiqd).join("\n")
  end

  private

  # Runs per class over the last hour as the world's Metrics::Query reports them, once they add
  # up to `total` (they are written with the next beat).
  def wait_for_query_runs(total)
    wait_until(25, "#{sidekiq_version}'s Metrics::Query to report #{total} runs") do
      r = sidekiq_json("runs.rb", <<~RUBY)
        require "sidekiq/metrics/query"
        top = Sidekiq::Metrics::Query.new.top_jobs(minutes: 60).job_results
        puts JSON.generate(top.transform_values { |jr| jr.totals["p"].to_i })
      RUBY
      r if r.values.sum == total
    end
  end

  # The world's Web UI Metrics page lists every class kiqd ran, and each class's page renders.
  def web_metrics_page(classes)
    base = start_web_ui(world, name: "web-ui-#{sidekiq_version}")
    page = http_get(base + "/metrics")
    assert_equal "200", page.code
    classes.each { |c| assert_includes page.body, c, "/metrics does not list #{c}" }
    classes.each do |c|
      assert_equal "200", http_get(base + "/metrics/#{URI.encode_www_form_component(c)}").code
    end
    busy = http_get(base + "/busy").body
    assert_includes busy, "kiqd-", "#{sidekiq_version}'s /busy shows kiqd's version"
    return unless chromium_path

    # Rendered by a browser: the page's script draws the classes' rows from the data.
    dom = chromium(base + "/metrics", "--dump-dom")
    classes.each { |c| assert_includes dom, c, "the rendered /metrics does not show #{c}" }
  end
end

KiqdInterop::Worlds.per_world(Sidekiq7InteropTest)
