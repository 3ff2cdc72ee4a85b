# The runner differential suite: the same application (differential_app/app.rb) and the same
# jobs, byte for byte, run once by the real Sidekiq server and once by kiqd with
# kiqd-ruby-runner, on one Sidekiq (6.4, 7.3 and 8.1, each from its test world; 8.1 on Ruby 3.3).
# What each leaves in Redis is normalised and compared: the retry set (each entry's fields, and
# its delay within Sidekiq's jitter), the dead set, the processed and failed counters, and what
# the application saw (lifecycle events, middleware, error and death handlers,
# sidekiq_retries_exhausted with the real exception object). Both servers run one job at a time,
# so the order of what the application records is the queue's.
#
# Nothing may differ but what docs/sidekiq-compatibility.md lists with a reason.
require "support"
require "worlds"

class RunnerDifferentialTest < Minitest::Test
  include KiqdInterop::Helpers

  APP = File.join(__dir__, "differential_app", "app.rb")
  RUNNER = File.join(KiqdInterop::ROOT, "runners", "ruby", "kiqd-ruby-runner")
  LISTS = %w[events middleware errors deaths exhausted ok].freeze

  # The scenario: [class, jid, payload fields]. retry_count 2 makes ExhaustJob's failure its last
  # under the app's max_retries of 3.
  JOBS = [
    ["OkJob", "d-ok", {"args" => [7]}],
    ["RetryInJob", "d-retry-in", {}],
    ["ExhaustJob", "d-exhaust", {"retry_count" => 2, "failed_at" => 1_700_000_000.5,
                                 "error_class" => "ApiError", "error_message" => "earlier"}],
    ["RaisingRetryInJob", "d-raising", {}],
    ["KillJob", "d-kill", {}],
    ["DiscardJob", "d-discard", {}],
    ["ExhaustedDiscardJob", "d-exh-discard", {"retry" => 0}],
    ["NoRetryJob", "d-no-retry", {"retry" => false}],
    ["NotDeadJob", "d-not-dead", {"retry" => 0, "dead" => false}],
  ].freeze

  def payloads
    JOBS.map do |klass, jid, extra|
      JSON.generate({"class" => klass, "args" => [], "retry" => true, "queue" => "default",
                     "jid" => jid, "created_at" => 1_700_000_100.25,
                     "enqueued_at" => 1_700_000_100.5}.merge(extra))
    end
  end

  def push_all
    redis.flushall
    payloads.each { |p| redis.lpush("queue:default", p) }
  end

  # Every job has left the queue and run (its middleware record is there).
  def wait_for_jobs(what)
    wait_until(60, "#{what} to run the #{JOBS.size} jobs") do
      redis.llen("queue:default").zero? && redis.llen("diff:middleware") >= JOBS.size
    end
  end

  def run_sidekiq
    push_all
    child = spawn_child("sidekiq-#{world}", KiqdInterop::Worlds.sidekiq(world, "-r", APP, "-c", "1",
                                                                        "-q", "default", "-t", "5"))
    wait_for_jobs("Sidekiq")
    assert child.stop(30), "Sidekiq stopped"
    outcome
  end

  def run_kiqd
    push_all
    kiqd = start_kiqd({"concurrency" => 1, "timeout" => 5, "compat" => KiqdInterop::Worlds.major(world).to_s,
                       "runners" => {"app" => {"command" => KiqdInterop::Worlds.ruby(world, RUNNER, "--require", APP),
                                               "processes" => 1, "threads" => 1}},
                       "handlers" => {"*" => {"runner" => "app"}}})
    wait_for_jobs("kiqd")
    kiqd.signal("TERM")
    assert kiqd.wait(30), "kiqd stopped"
    outcome
  end

  # What a run left, without what differs by nature: timestamps (their type is kept), the jitter
  # inside Sidekiq's range, the heartbeat's count of `beat` events.
  def outcome
    {
      "retry" => redis.zrange("retry", 0, -1, with_scores: true).map { |m, s| entry(m, s) }.sort_by { |e| e["jid"] },
      "dead" => redis.zrange("dead", 0, -1).map { |m| entry(m) }.sort_by { |e| e["jid"] },
      "processed" => redis.get("stat:processed").to_i,
      "failed" => redis.get("stat:failed").to_i,
      "queue" => redis.lrange("queue:default", 0, -1),
    }.merge(LISTS.to_h { |l| [l, redis.lrange("diff:#{l}", 0, -1).map { |v| JSON.parse(v) }] })
     .tap { |o| o["events"] = o["events"].chunk_while { |a, b| a == b && a == "beat" }.map(&:first) }
  end

  def entry(member, score = nil)
    j = JSON.parse(member)
    out = j.reject { |k, _| %w[failed_at retried_at].include?(k) }
    %w[failed_at retried_at].each { |k| out[k] = j[k].class.name if j.key?(k) }
    out["delay"] = delay(j, score) if score
    out
  end

  # The retry's delay as Sidekiq's formula has it: the job's own (RetryInJob: 42 + count) or
  # count**4 + 15, plus jitter below 10 * (count + 1); said as "BASE+jitter" when inside it.
  def delay(j, score)
    at = j["retried_at"] || j["failed_at"]
    at /= 1000.0 if at.is_a?(Integer) # 8.x: milliseconds
    count = j["retry_count"]
    base = j["class"] == "RetryInJob" ? 42 + count : count**4 + 15
    d = score - at
    d >= base - 1 && d < base + 10 * (count + 1) + 1 ? "#{base}+jitter" : d.round(1)
  end

  def test_kiqd_with_the_runner_leaves_what_sidekiq_leaves
    sidekiq = run_sidekiq
    kiqd = run_kiqd
    # The scenario must have done what it is there for (else both could agree on nothing).
    assert_includes sidekiq["dead"].map { |e| e["jid"] }, "d-exhaust", "the last failure went to the dead set"
    assert_includes sidekiq["retry"].map { |e| e["jid"] }, "d-retry-in"
    assert_includes sidekiq["exhausted"].map(&:first), "d-exhaust"
    assert_includes sidekiq["events"], "startup"
    LISTS.each do |list|
      assert_equal sidekiq[list], kiqd[list], "#{list}: what the application saw differs (Sidekiq first, kiqd second)"
    end
    %w[retry dead processed failed queue].each do |key|
      assert_equal sidekiq[key], kiqd[key], "#{key} differs (Sidekiq first, kiqd second)"
    end
  end

  KiqdInterop::Worlds.per_world(self, %w[sidekiq64 sidekiq73 sidekiq81])
end
