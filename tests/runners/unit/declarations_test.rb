# What the runner reports of the application in `ready` (runners/ruby/lib/kiqd/runner/
# declarations.rb), against the real Sidekiq the Ruby loads, with the test app (app.rb) booted
# in this process as the runner boots one.
require_relative "support"

class DeclarationsTest < Minitest::Test
  def setup
    UnitHarness.booted_glue
    @major = Sidekiq::VERSION.to_i
  end

  def test_greeting_names_the_runner_the_ruby_and_the_sidekiq
    greeting = KiqdRubyRunner.greeting("threads" => 3)
    assert_equal Process.pid, greeting["pid"]
    assert_equal 3, greeting["threads"]
    assert_equal "kiqd-ruby-runner #{KiqdRubyRunner::VERSION} (ruby #{RUBY_VERSION}, sidekiq #{Sidekiq::VERSION})",
                 greeting["runner"]
    assert_equal KiqdRubyRunner.app_settings, greeting["app"]
    JSON.generate(greeting) # what `ready` sends must be JSON
  end

  def test_settings_that_differ_from_sidekiqs_defaults
    app = KiqdRubyRunner.app_settings
    assert_equal 7, app["max_retries"]
    assert_equal 500, app["dead_max_jobs"]
    refute app.key?("dead_timeout_in_seconds"), "Sidekiq's default is not reported"
  end

  def test_capsules_besides_the_default_one
    capsules = KiqdRubyRunner.app_settings["capsules"]
    if @major >= 7
      assert_equal [{"name" => "unit_single", "concurrency" => 1, "queues" => [["unit_single", 0]]},
                    {"name" => "unit_weighted", "concurrency" => 2, "queues" => [["unit_a", 3], ["unit_b", 1]]}],
                   capsules
    else
      assert_nil capsules, "Sidekiq 6 has no capsules"
    end
  end

  def test_job_classes_with_a_queue_or_worker_attributes
    classes = KiqdRubyRunner.app_settings["classes"]
    assert_equal classes.sort_by { |c| c["class"] }, classes, "sorted by class name"
    ours = classes.select { |c| c["class"].start_with?("Unit") }
    assert_equal [
      {"class" => "UnitQueuedJob", "queue" => "unit_single"},
      {"class" => "UnitSearchJob", "queue" => "unit_search", "urgency" => "high", "resource_boundary" => "cpu",
       "feature_category" => "search", "idempotent" => true, "external_dependencies" => false,
       "tags" => %w[search pdf]}
    ], ours, "UnitBrokenAttributesJob raises in get_urgency and says nothing; the default-queue classes are left out"
  end

  # Not a Unit* class: the list above stays the app's own, whatever order the tests run in.
  def test_a_class_made_after_boot_is_reported_at_the_next_ready
    refute(KiqdRubyRunner.app_classes.any? { |c| c["class"] == "LateUnitJob" })
    Object.const_set(:LateUnitJob, Class.new { include Sidekiq::Worker; sidekiq_options queue: "late" })
    assert_includes KiqdRubyRunner.app_classes, {"class" => "LateUnitJob", "queue" => "late"}
  end

  def test_a_class_without_a_name_is_not_reported
    anonymous = Class.new { include Sidekiq::Worker; sidekiq_options queue: "nameless" }
    assert_nil anonymous.name
    refute(KiqdRubyRunner.app_classes.any? { |c| c["queue"] == "nameless" })
  end

  def test_fetch_patches_name_the_module_and_its_gem
    patches = KiqdRubyRunner.app_settings["fetch_patches"]
    assert_includes patches, {"target" => "Sidekiq::BasicFetch", "module" => "UnitFetchPatch", "gem" => "", "honoured" => false}
    assert(patches.none? { |p| p["gem"] == "sidekiq" }, "Sidekiq's own modules are not patches")
  end

  def test_the_gem_of_a_module
    assert_equal "sidekiq", KiqdRubyRunner.gem_of(Sidekiq::Manager)
    assert_nil KiqdRubyRunner.gem_of(UnitFetchPatch), "defined outside any gem"
    assert_nil KiqdRubyRunner.patch_entry("fetch", Sidekiq::Manager), "Sidekiq's own"
    assert_equal({"target" => "fetch", "module" => "UnitFetchPatch", "gem" => "", "honoured" => false},
                 KiqdRubyRunner.patch_entry("fetch", UnitFetchPatch))
  end
end
