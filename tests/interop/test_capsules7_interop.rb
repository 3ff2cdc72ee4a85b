# Sidekiq 7 capsules in one kiqd process, as the real Sidekiq 7.3.10 sees them: a sidekiq.yml
# with `:capsules:` (the shape 7.3's CLI reads) runs in one kiqd, and 7.3's ProcessSet,
# sidekiqmon and Web UI Busy page show its total concurrency and each capsule's queue weights;
# jobs pushed with 7.3's client to each capsule's queues run. Everything 7.3 runs in a child
# Ruby with ../shared/gems ahead of Debian's gems; skipped with a message where that folder is
# absent.
require "support"
require "sidekiq7_support"

class Capsules7InteropTest < Minitest::Test
  include KiqdInterop::Helpers
  include KiqdInterop::Sidekiq7Helpers

  # Sidekiq's sidekiq.yml spelling (symbol keys); the default capsule is start_kiqd's
  # concurrency 2 on `default`.
  CAPSULES = {
    ":capsules" => {
      ":reports" => { ":concurrency" => 1, ":queues" => ["reports"] },
      ":bulk" => { ":concurrency" => 2, ":queues" => [["bulk", 3], ["bulk_low", 1]] }
    }
  }.freeze

  def setup
    skip_without_sidekiq7
    super
  end

  def test_capsules_in_sidekiq_7_3_tools
    kiqd = start_kiqd(CAPSULES)
    # A long job in `reports` keeps that capsule's one thread busy.
    jids = sidekiq7_json("push7.rb", <<~RUBY)
      jids = [Sidekiq::Client.push("class" => "Kiqd::Sleep", "args" => [30], "queue" => "reports")]
      %w[default bulk bulk_low].each do |q|
        jids << Sidekiq::Client.push("class" => "Kiqd::Noop", "args" => [], "queue" => q)
      end
      puts JSON.generate(jids)
    RUBY
    assert_equal 4, jids.size

    p7 = wait_until(20, "7.3's ProcessSet to show kiqd with one busy thread") do
      r = sidekiq7_json("processes7.rb", <<~RUBY, kiqd.identity)
        p = Sidekiq::ProcessSet.new.find { |x| x.identity == ARGV[0] }
        puts JSON.generate(p && { "queues" => p.queues, "weights" => p.weights,
                                  "concurrency" => p["concurrency"], "busy" => p["busy"],
                                  "processed" => Sidekiq::Stats.new.processed,
                                  "total_concurrency" => Sidekiq::ProcessSet.new.total_concurrency })
      RUBY
      r if r && r["busy"] == 1 && r["processed"] == 3
    end
    # Launcher#to_data with capsules: the total, every capsule's queues, one weights hash each.
    assert_equal 5, p7["concurrency"]
    assert_equal 5, p7["total_concurrency"]
    assert_equal %w[default reports bulk bulk_low], p7["queues"]
    assert_equal [{ "default" => 0 }, { "reports" => 0 }, { "bulk" => 3, "bulk_low" => 1 }],
                 p7["weights"]

    mon = sidekiqmon7
    assert_includes mon, kiqd.identity
    assert_includes mon, "Threads: 5 (1 busy)"
    assert_match(/Queues: .*default/, mon)
    assert_includes mon, "bulk: 3, bulk_low: 1"
    refute_match(/Unknown/, mon)

    base = start_web_ui(INCLUDES, name: "web-ui-7.3")
    busy = http_get(base + "/busy")
    assert_equal "200", busy.code
    assert_includes busy.body, kiqd.identity.split(":").first
    # busy_weights: one capsule per "; ", as 7.3 renders a Sidekiq 7 process with capsules.
    assert_includes busy.body, "default; reports; bulk: 3, bulk_low: 1"
    num = ->(n) { %(<td class="num"><span data-nwp="0">#{n}</span></td>) }
    assert_match(/#{Regexp.escape(num[5])}\s*#{Regexp.escape(num[1])}/, busy.body,
                 "the process row's Threads (5) and Busy (1) columns")
    assert_match(%r{<span data-nwp="0">5</span></h3>\s*<p>Threads</p>}, busy.body,
                 "the Threads total at the top of the Busy page")
  end
end
