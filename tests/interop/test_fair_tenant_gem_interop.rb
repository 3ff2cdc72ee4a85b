# Issue 19 (item 5's real-gem check): sidekiq-fair_tenant 0.1.0's own spec scenario
# (spec/sidekiq/fair_tenant_spec.rb with its spec/support/jobs.rb, loaded unmodified from
# the shared/gems folder beside the repository; skipped with a message where that folder is absent),
# pushed by the gem's real client middleware on Debian's Sidekiq 6.4.1 with ActiveSupport and
# ActiveJob loaded — so `per: 1.hour` travels as "per":"3600" — and then run by kiqd, which
# serves every queue. The gem routes each push as its spec expects, and kiqd runs every one of
# the jobs: none fails on the rules' format, none is left.
require "support"
require "open3"

class FairTenantGemInteropTest < Minitest::Test
  include KiqdInterop::Helpers

  GEMS = File.join(File.dirname(KiqdInterop::ROOT), "shared", "gems")
  GEM = File.join(GEMS, "sidekiq-fair_tenant-0.1.0")
  SCENARIO = File.join(__dir__, "fair_tenant_gem", "spec_scenario.rb")

  # The spec's expectations, in the scenario's order. One differs on Sidekiq 6.4.1: a push
  # with an explicit other queue is rerouted and counted by the gem there (Sidekiq merges the
  # class's options under `set`), which the spec (run on newer Sidekiq) does not expect;
  # docs/fair-tenants.md.
  EXPECTED = [
    %w[plain default],
    ["throttled foo 1", "whatever"], ["throttled foo 2", "whatever_supaslow"],
    ["throttled bar", "whatever"], ["throttled foo after 1 h", "whatever_semislow"],
    ["throttled foo after 1 d", "whatever"],
    ["explicit queue 1", "another"], ["explicit queue 2", "whatever_supaslow"],
    ["active job 1", "whatever"], ["active job 2", "whatever_supaslow"],
    ["active job bar", "whatever"], ["active job after 1 h", "whatever_semislow"],
    ["active job after 1 d", "whatever"],
    ["active job explicit queue 1", "another"], ["active job explicit queue 2", "another"],
  ].freeze

  def setup
    skip "the real gems are not at #{GEMS}: sidekiq-fair_tenant spec scenario skipped" unless
      File.directory?(GEM)
    super
  end

  def test_the_gems_spec_scenario_runs_on_kiqd
    queues = %w[default whatever whatever_semislow whatever_supaslow another]
    handlers = %w[SamplePlainJob SampleThrottledJob SampleActiveJob].to_h do |c|
      [c, { "exec" => ["/bin/true"] }]
    end
    env = { "REDIS_URL" => redis_url, "FAIR_TENANT_GEM" => GEM,
            "RUBYLIB" => [File.join(GEM, "lib"), File.join(GEMS, "anyway_config-1.4.4/lib")].join(":") }
    out, err, status = Open3.capture3(env, KiqdInterop::RUBY, SCENARIO)
    assert status.success?, "the scenario failed:\n#{err}"
    lines = out.lines.map { |l| JSON.parse(l) }
    assert_equal({ "done" => true }, lines.pop)
    assert_equal EXPECTED, lines.map { |l| [l["example"], l["queue"]] }

    # kiqd starts once the scenario has pushed everything: its own server-side rerouting
    # counts in the same windows, which would change the gem's answers while the spec runs.
    kiqd = start_kiqd({ "concurrency" => 3, "queues" => queues, "handlers" => handlers })

    # kiqd runs every job, wherever the gem put it; the rules ("per":"3600") fail none.
    stats = wait_until(60, "kiqd to run all #{lines.size} jobs") do
      s = Sidekiq::Stats.new
      s if s.processed >= lines.size
    end
    assert_equal lines.size, stats.processed
    assert_equal 0, stats.failed
    assert_equal 0, Sidekiq::RetrySet.new.size
    assert_equal 0, Sidekiq::DeadSet.new.size
    queues.each { |q| assert_equal 0, Sidekiq::Queue.new(q).size, q }
    refute_match(/InvalidFairTenant/, kiqd.log)
  end
end
