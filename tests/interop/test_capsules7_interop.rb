# Sidekiq 7 capsules in one kiqd process, as the real Sidekiq 7.3.10 and 8.1.7 see them (the
# test's world: sidekiq73, sidekiq81): a sidekiq.yml with `:capsules:` (the shape 7.3's CLI
# reads) runs in one kiqd, and the world's ProcessSet, sidekiqmon and Web UI Busy page show its
# total concurrency and each capsule's queues (with their weights where that version shows
# them); jobs pushed with the world's client to each capsule's queues run. The world's Sidekiq
# runs in children started through scripts/world; the test runs once per world.
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
    KiqdInterop::Worlds.require!(world)
    super
  end

  def test_capsules_in_the_worlds_sidekiq_tools
    kiqd = start_kiqd(CAPSULES)
    # A long job in `reports` keeps that capsule's one thread busy.
    jids = sidekiq_json("push.rb", <<~RUBY)
      jids = [Sidekiq::Client.push("class" => "Kiqd::Sleep", "args" => [30], "queue" => "reports")]
      %w[default bulk bulk_low].each do |q|
        jids << Sidekiq::Client.push("class" => "Kiqd::Noop", "args" => [], "queue" => q)
      end
      puts JSON.generate(jids)
    RUBY
    assert_equal 4, jids.size

    pw = wait_until(20, "#{sidekiq_version}'s ProcessSet to show kiqd with one busy thread") do
      r = sidekiq_json("processes.rb", <<~RUBY, kiqd.identity)
        p = Sidekiq::ProcessSet.new.find { |x| x.identity == ARGV[0] }
        puts JSON.generate(p && { "queues" => p.queues, "weights" => p.weights,
                                  "capsules" => p["capsules"],
                                  "concurrency" => p["concurrency"], "busy" => p["busy"],
                                  "processed" => Sidekiq::Stats.new.processed,
                                  "total_concurrency" => Sidekiq::ProcessSet.new.total_concurrency })
      RUBY
      r if r && r["busy"] == 1 && r["processed"] == 3
    end
    # Launcher#to_data with capsules: the total, every capsule's queues, one weights hash each
    # (7.3's ProcessSet), or the capsules themselves (8.1's: Capsule#to_h by name; its
    # Process#weights merges them into one hash).
    assert_equal 5, pw["concurrency"]
    assert_equal 5, pw["total_concurrency"]
    assert_equal %w[default reports bulk bulk_low], pw["queues"]
    if sidekiq_major == 7
      assert_equal [{ "default" => 0 }, { "reports" => 0 }, { "bulk" => 3, "bulk_low" => 1 }],
                   pw["weights"]
    else
      assert_equal({ "default" => { "concurrency" => 2, "mode" => "strict", "weights" => { "default" => 0 } },
                     "reports" => { "concurrency" => 1, "mode" => "strict", "weights" => { "reports" => 0 } },
                     "bulk" => { "concurrency" => 2, "mode" => "weighted",
                                 "weights" => { "bulk" => 3, "bulk_low" => 1 } } },
                   pw["capsules"])
      assert_equal({ "default" => 0, "reports" => 0, "bulk" => 3, "bulk_low" => 1 }, pw["weights"])
    end

    mon = world_sidekiqmon
    assert_includes mon, kiqd.identity
    assert_includes mon, "Threads: 5 (1 busy)"
    assert_match(/Queues: .*default/, mon)
    # 7.3 prints each capsule's weights, 8.1 each capsule's queue names.
    assert_includes mon, sidekiq_major == 7 ? "bulk: 3, bulk_low: 1" : "bulk, bulk_low"
    refute_match(/Unknown/, mon)

    base = start_web_ui(world, name: "web-ui-#{sidekiq_version}")
    busy = http_get(base + "/busy")
    assert_equal "200", busy.code
    assert_includes busy.body, kiqd.identity.split(":").first
    # One capsule per "; ", as the world's Busy page renders a process with capsules (7.3:
    # busy_weights, with weights; 8.1: queue_names_by_capsule, names only).
    assert_includes busy.body, sidekiq_major == 7 ? "default; reports; bulk: 3, bulk_low: 1"
                                                  : "default; reports; bulk, bulk_low"
    num = ->(n) { %(<td class="num"><span data-nwp="0">#{n}</span></td>) }
    assert_match(/#{Regexp.escape(num[5])}\s*#{Regexp.escape(num[1])}/, busy.body,
                 "the process row's Threads (5) and Busy (1) columns")
    assert_match(%r{<span data-nwp="0">5</span></h3>\s*<p>Threads</p>}, busy.body,
                 "the Threads total at the top of the Busy page")
  end
end

KiqdInterop::Worlds.per_world(Capsules7InteropTest)
