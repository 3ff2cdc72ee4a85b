# kiqd beside the real Sidekiq 7.3.10 and Debian's 6.4.1 under `compat: auto` (the default):
# the decision it logs (alone, with a 6.4.1 process, with a 7.3 process, and as they come and
# go), the process record each version's ProcessSet and sidekiqmon read, and Sidekiq 7's
# execution metrics, which 7.3's own Sidekiq::Metrics::Query and Web UI Metrics page must report
# exactly. This suite's Ruby process has 6.4.1 loaded, so everything 7.3 runs in a child Ruby
# with the gems from ../shared/gems (7.3.10, redis-client 0.26.4, connection_pool 2.5.5) ahead of
# Debian's; skipped with a message where that folder is absent.
require "support"
require "sidekiq7_support"

class Sidekiq7InteropTest < Minitest::Test
  include KiqdInterop::Helpers
  include KiqdInterop::Sidekiq7Helpers

  def setup
    skip_without_sidekiq7
    super
  end

  # A real Sidekiq 7.3.10 process serving only the queue `other` (so kiqd runs every job here).
  def spawn_sidekiq7
    jobfile = File.join(tmpdir, "jobs7.rb")
    File.write(jobfile, "class Other7; include Sidekiq::Job; def perform; end; end\n")
    spawn_sidekiq_server(7, jobfile, ["other"])
  end

  # A real Sidekiq 6.4.1 process (Debian's) serving only the queue `other`.
  def spawn_sidekiq6
    jobfile = File.join(tmpdir, "jobs6.rb")
    File.write(jobfile, "class Other6; include Sidekiq::Worker; def perform; end; end\n")
    spawn_sidekiq_server(6, jobfile, ["other"])
  end

  # What 7.3's ProcessSet reads for kiqd.
  def sidekiq7_process(identity)
    sidekiq7_json("processes7.rb", <<~RUBY, identity)
      p = Sidekiq::ProcessSet.new.find { |x| x.identity == ARGV[0] }
      puts JSON.generate(p && { "queues" => p.queues, "weights" => p.weights,
                                "version" => p.version, "embedded" => p.embedded?,
                                "concurrency" => p["concurrency"], "busy" => p["busy"],
                                "total_concurrency" => Sidekiq::ProcessSet.new.total_concurrency })
    RUBY
  end

  # Alone, kiqd presents itself as 6, yet writes what 7's tools read; both 6.4.1's and 7.3's
  # ProcessSet and sidekiqmon show it, with its weights under 7.3, and the 7.3 Web UI's Metrics
  # page shows its jobs (it writes the metrics of 7 and 8 both: the Web UI may be either).
  def test_auto_alone_renders_in_6_and_7
    kiqd = start_kiqd({ "concurrency" => 3, "queues" => [["critical", 3], ["default", 1]] })
    wait_for_decision(kiqd, "no other Sidekiq process in the cluster; presenting as Sidekiq 6 " \
                            "(execution metrics in the layouts of 7 and 8)")
    info = JSON.parse(redis.hget(kiqd.identity, "info"))
    assert_equal [{ "critical" => 3, "default" => 1 }], info["weights"]
    assert_match(/\Akiqd-/, info["version"])
    assert_equal false, info["embedded"]
    assert_equal({ "default" => { "concurrency" => 3, "mode" => "weighted",
                                  "weights" => { "critical" => 3, "default" => 1 } } },
                 info["capsules"])
    assert_equal "3", redis.hget(kiqd.identity, "concurrency")

    p6 = wait_until(10, "kiqd in 6.4.1's ProcessSet") { process_for(kiqd) }
    assert_equal %w[critical default], p6.queues
    assert_equal 3, p6["concurrency"]
    mon6 = spawn_child("sidekiqmon", KiqdInterop.sidekiq_command("sidekiqmon"))
    assert mon6.wait(30)&.success?, mon6.log
    assert_includes mon6.log, kiqd.identity
    assert_match(/Queues: critical, default/, mon6.log)

    p7 = sidekiq7_process(kiqd.identity)
    refute_nil p7, "7.3's ProcessSet does not list kiqd"
    assert_equal [{ "critical" => 3, "default" => 1 }], p7["weights"]
    assert_equal info["version"], p7["version"]
    assert_equal false, p7["embedded"]
    assert_equal 3, p7["total_concurrency"]
    mon7 = sidekiqmon7
    assert_includes mon7, kiqd.identity
    assert_includes mon7, "Queues: critical: 3, default: 1"
    assert_includes mon7, "Version: #{info["version"]}"
    refute_match(/Unknown/, mon7)

    # Jobs run, and 7.3's Metrics::Query (what the Metrics page reads) and Web UI show them.
    3.times { Sidekiq::Client.push("class" => "Kiqd::Noop", "args" => []) }
    wait_until(15, "3 jobs processed") { Sidekiq::Stats.new.processed == 3 }
    assert_equal({ "Kiqd::Noop" => 3 }, wait_for_query7_runs(3))
    web_metrics_page(["Kiqd::Noop"])
  end

  # With a 6.4.1 process the decision stays 6; it is logged once; the metrics of 7 and 8 are
  # written (a 6.4.1 process writes none, and the Web UI may be newer than the processes).
  def test_auto_with_a_sidekiq_6_process
    six = spawn_sidekiq6
    kiqd = start_kiqd
    wait_for_decision(kiqd, "1 Sidekiq 6 process; presenting as Sidekiq 6 (execution metrics " \
                            "in the layouts of 7 and 8)")
    p6 = wait_until(10, "kiqd in 6.4.1's ProcessSet") { process_for(kiqd) }
    assert_equal ["default"], p6.queues
    2.times { Sidekiq::Client.push("class" => "Kiqd::Noop", "args" => []) }
    wait_until(15, "2 jobs processed") { Sidekiq::Stats.new.processed == 2 }
    assert_equal({ "Kiqd::Noop" => 2 }, wait_for_query7_runs(2))
    assert_equal 1, decision_lines(kiqd).size, "an unchanged decision is logged once"
    six.stop
  end

  # With a 7.3 process kiqd presents as 7 and writes 7's metrics, which 7.3's Query reports
  # exactly; when the 7.3 process leaves, kiqd goes back to 6, and forth again when one comes.
  def test_auto_with_sidekiq_7_metrics_are_exact
    seven = spawn_sidekiq7
    kiqd = start_kiqd({ "concurrency" => 3 })
    wait_for_decision(kiqd, "1 Sidekiq 7 process; presenting as Sidekiq 7 (execution metrics " \
                            "in the layout of 7)")
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

    got = wait_until(25, "7.3's Metrics::Query to report 9 runs") do
      r = sidekiq7_json("query7.rb", <<~RUBY, *expected.keys)
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

    # The 7.3 process leaves: back to 6 (logged once), and to 7 again when another comes.
    seven.stop
    wait_for_decision(kiqd, "no other Sidekiq process in the cluster; presenting as Sidekiq 6")
    spawn_sidekiq7
    wait_for_decision(kiqd, "1 Sidekiq 7 process; presenting as Sidekiq 7")
    assert_equal 3, decision_lines(kiqd).size, decision_lines(kiqd).join("\n")
  end

  private

  # Runs per class over the last hour as 7.3's Metrics::Query reports them, once they add up to
  # `total` (they are written with the next beat).
  def wait_for_query7_runs(total)
    wait_until(25, "7.3's Metrics::Query to report #{total} runs") do
      r = sidekiq7_json("runs7.rb", <<~RUBY)
        require "sidekiq/metrics/query"
        top = Sidekiq::Metrics::Query.new.top_jobs(minutes: 60).job_results
        puts JSON.generate(top.transform_values { |jr| jr.totals["p"].to_i })
      RUBY
      r if r.values.sum == total
    end
  end

  # The 7.3 Web UI's Metrics page lists every class kiqd ran, and each class's page renders.
  def web_metrics_page(classes)
    base = start_web_ui(INCLUDES, name: "web-ui-7.3")
    page = http_get(base + "/metrics")
    assert_equal "200", page.code
    classes.each { |c| assert_includes page.body, c, "/metrics does not list #{c}" }
    classes.each do |c|
      assert_equal "200", http_get(base + "/metrics/#{URI.encode_www_form_component(c)}").code
    end
    busy = http_get(base + "/busy").body
    assert_includes busy, "kiqd-", "7.3's /busy shows kiqd's version"
    return unless chromium_path

    # Rendered by a browser: the page's script draws the classes' rows from the data.
    dom = chromium(base + "/metrics", "--dump-dom")
    classes.each { |c| assert_includes dom, c, "the rendered /metrics does not show #{c}" }
  end
end
