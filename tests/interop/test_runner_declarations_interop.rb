# What an app declares in Ruby and kiqd's YAML does not restate, taken from kiqd-ruby-runner at
# boot (declarations_app/app.rb, on Sidekiq 7.3 and 8.1 from their test worlds):
#   * a capsule of one thread (`config.capsule("single")`): the real Sidekiq server runs its
#     queue's jobs one at a time, and so does kiqd, even with the queue in kiqd's own `queues:`;
#   * job classes with GitLab-style worker attributes and a `sidekiq_options` queue: kiqd's done
#     lines carry their urgency, resource boundary and feature category, and a kiqd started with
#     the selector `resource_boundary=cpu` serves the cpu-bound class's queue.
# Concurrency is measured from the jobs' own ledger (each job's start and end times).
require "support"
require "worlds"
require "ledger"

class RunnerDeclarationsTest < Minitest::Test
  include KiqdInterop::Helpers
  include KiqdInterop::LedgerReads

  APP = File.join(__dir__, "declarations_app", "app.rb")
  RUNNER = File.join(KiqdInterop::ROOT, "runners", "ruby", "kiqd-ruby-runner")
  SERIAL_JOBS = 5

  def push(klass, queue, args = [])
    jid = SecureRandom.hex(12)
    redis.lpush("queue:#{queue}", JSON.generate("class" => klass, "args" => args, "jid" => jid,
                                                "queue" => queue, "retry" => true,
                                                "created_at" => Time.now.to_f, "enqueued_at" => Time.now.to_f))
    redis.sadd("queues", queue)
    jid
  end

  def push_serial_jobs
    redis.flushall
    SERIAL_JOBS.times.map { |i| push("SerialJob", "single", [i]) }
  end

  def wait_for_serial_jobs(what)
    wait_until(60, "#{what} to run the #{SERIAL_JOBS} SerialJobs") do
      ledger.count { |e| e[1] == "single" } == SERIAL_JOBS
    end
  end

  def kiqd_config(extra = {})
    {"concurrency" => 4, "timeout" => 5, "compat" => KiqdInterop::Worlds.major(world).to_s,
     "runners" => {"app" => {"command" => KiqdInterop::Worlds.ruby(world, RUNNER, "--require", APP),
                             "processes" => 1}},
     "handlers" => {"*" => {"runner" => "app"}}}.merge(extra)
  end

  def test_a_capsule_defined_in_ruby_runs_its_jobs_one_at_a_time
    push_serial_jobs
    sidekiq = spawn_child("sidekiq-#{world}", KiqdInterop::Worlds.sidekiq(world, "-r", APP, "-c", "4",
                                                                          "-q", "default", "-t", "5"))
    wait_for_serial_jobs("Sidekiq")
    assert sidekiq.stop(30), "Sidekiq stopped"
    assert_equal 1, most_at_once("single"), "the real Sidekiq server runs the capsule's jobs one at a time"

    push_serial_jobs
    # The queue is also in kiqd's own list, as a team moving to kiqd would likely write it.
    kiqd = start_kiqd(kiqd_config("queues" => %w[default single]))
    wait_for_serial_jobs("kiqd")
    assert_equal 1, most_at_once("single"), "kiqd runs the app's capsule's jobs one at a time"
    assert_includes kiqd.log, "capsules from the app's Sidekiq configuration: single (concurrency=1, queues single)"
    assert_includes kiqd.log, "queues single (capsule single) are listed in kiqd's queues and in a capsule of the app"
    info = JSON.parse(redis.hget(kiqd.identity, "info"))
    assert_equal 5, info["concurrency"], "the process record counts the capsule's thread"
    assert_includes info["queues"], "single"
  end

  def test_worker_attributes_and_queues_of_the_apps_classes
    redis.flushall
    kiqd = start_kiqd(kiqd_config("queues" => %w[default search]))
    jid = push("SearchIndexJob", "search")
    line = wait_until(60, "kiqd's done line for SearchIndexJob") do
      kiqd.log.lines.find { |l| l.include?("jid=#{jid}") && l.include?("done:") }
    end
    assert_includes line, "urgency=high resource_boundary=cpu feature_category=global_search"
    assert_includes kiqd.log, "job classes from the app: 1 with worker attributes, 2 with a queue of their own"

    # A process that serves only the cpu-bound classes finds their queue from the app's classes.
    selected = start_kiqd(kiqd_config("selector" => "resource_boundary=cpu"), name: "kiqd-cpu")
    wait_until(30, "the cpu-bound process's start line") { selected.log[/starting: .* queues=\S+/] }
    assert_match(/starting: .* queues=search \(/, selected.log)
  end

  KiqdInterop::Worlds.per_world(self, %w[sidekiq73 sidekiq81])
end
