# Fair tenants: kiqd and Ruby producers using the sidekiq-fair_tenant gem count the
# same sliding windows and make the same rerouting decisions.
#
# The gem is not packaged in Debian, so GemFairTenant below re-implements its client middleware
# faithfully from Envek/sidekiq-fair_tenant v0.1.0 lib/sidekiq/fair_tenant/client_middleware.rb
# and lib/sidekiq/fair_tenant/config.rb (commit b738dd1), statement for statement. The only
# changes: ActiveSupport is not installed, so `blank?` is spelled `nil? || empty?` and
# `symbolize_keys` is `transform_keys(&:to_sym)`; the settings are constants instead of
# anyway_config; the logger is Sidekiq's. It runs as a real Sidekiq 6.4.1 client middleware.
#
# The rules are the gem README's: SomeJob, queue 'default', fair_tenant_queues
#   [{queue: 'throttled_2x', threshold: 100, per: 1.hour}, {queue: 'throttled_4x', threshold: 10,
#   per: 1.minute}], tenant = the first perform argument;
# kiqd gets the same rules from its YAML (handlers: SomeJob: fair_tenant: {arg: 0}).
require "support"
require "minitest/mock"

module GemFairTenant
  MAX_THROTTLING_WINDOW = 86_400 # config.rb: attr_config max_throttling_window: 86_400
  ENQUEUES_KEY = "sidekiq-fair_tenant:enqueued:%<job_class>s:tenant:%<fair_tenant>s"

  class ClientMiddleware
    def call(worker, job, queue, redis_pool)
      job_class = job_class(worker, job)
      arguments = job["wrapped"] ? job.dig("args", 0, "arguments") : job["args"]
      return yield unless enabled?(job_class, job, queue)

      job["fair_tenant"] ||= tenant_id(job_class, job, arguments)
      unless job["fair_tenant"]
        logger.warn "#{job_class} with args #{arguments.inspect} won't be throttled: missing `fair_tenant` in job"
        return yield
      end

      redis_pool.then do |redis|
        register_job(job_class, job, queue, redis)
        job["queue"] = assign_queue(job_class, job, queue, redis)
      end

      yield
    end

    private

    def enabled?(job_class, job, queue)
      return false if job["fair_tenant_queues"].nil? || job["fair_tenant_queues"].empty?

      original_queue = original_queue(job_class, job, queue)
      return false if original_queue != job["queue"]

      true
    end

    def register_job(job_class, job, queue, redis)
      enqueues_key = enqueues_key(job_class, job, queue)
      max_throttling_window = MAX_THROTTLING_WINDOW
      redis.multi do |tx|
        tx.zremrangebyscore(enqueues_key, "-inf", (Time.now - max_throttling_window).to_i)
        tx.zadd(enqueues_key, Time.now.to_i, "jid:#{job["jid"]}")
        tx.expire(enqueues_key, max_throttling_window)
      end
    end

    def assign_queue(job_class, job, queue, redis)
      enqueues_key = enqueues_key(job_class, job, queue)

      matching_rules =
        job["fair_tenant_queues"].map { |h| h.transform_keys(&:to_sym) }.filter do |config|
          threshold = config[:threshold]
          window_start = Time.now - (config[:per] || MAX_THROTTLING_WINDOW)
          threshold < redis.zcount(enqueues_key, window_start.to_i, Time.now.to_i)
        end

      matching_rules.any? ? matching_rules.last[:queue] : queue
    end

    def enqueues_key(job_class, job, queue)
      format(ENQUEUES_KEY, queue: queue, fair_tenant: job["fair_tenant"], job_class: job_class)
    end

    def job_class(worker, job)
      job_class = job["wrapped"] || worker
      return job_class if job_class.is_a?(Class)
      return job_class.constantize if job_class.respond_to?(:constantize)

      Object.const_get(job_class.to_s)
    end

    def tenant_id(job_class, job, arguments)
      return job_class.fair_tenant(*arguments) if job_class.respond_to?(:fair_tenant)

      job["apartment"]
    end

    def original_queue(job_class, _job, queue)
      if job_class.respond_to?(:queue_name)
        job_class.queue_name
      elsif job_class.respond_to?(:queue)
        job_class.queue.to_s
      else
        queue
      end
    end

    def logger
      Sidekiq.logger
    end
  end
end

# The README's job class.
class SomeJob
  include Sidekiq::Worker
  sidekiq_options queue: "default",
                  fair_tenant_queues: [
                    { queue: "throttled_2x", threshold: 100, per: 3600 },
                    { queue: "throttled_4x", threshold: 10, per: 60 },
                  ]

  def self.fair_tenant(*perform_arguments)
    perform_arguments.first
  end
end

class FairTenantInteropTest < Minitest::Test
  include KiqdInterop::Helpers

  QUEUES = %w[default throttled_2x throttled_4x].freeze
  README_RULES_YAML = {
    "SomeJob" => {
      "queue" => "default",
      "fair_tenant_queues" => [
        { "queue" => "throttled_2x", "threshold" => 100, "per" => 3600 },
        { "queue" => "throttled_4x", "threshold" => 10, "per" => 60 },
      ],
      "fair_tenant" => { "arg" => 0 },
    },
  }.freeze

  def setup
    super
    @config_path = File.join(tmpdir, "enqueue.yml")
    File.write(@config_path, { "redis" => { "url" => redis_url },
                               "handlers" => README_RULES_YAML }.to_yaml)
    @gem_client = Sidekiq::Client.new
    @gem_client.middleware { |chain| chain.add GemFairTenant::ClientMiddleware }
  end

  def key(tenant, job_class = "SomeJob")
    "sidekiq-fair_tenant:enqueued:#{job_class}:tenant:#{tenant}"
  end

  # The queue a jid was pushed to.
  def queue_of(jid)
    QUEUES.find do |q|
      redis.lrange("queue:#{q}", 0, -1).any? { |p| JSON.parse(p)["jid"] == jid }
    end
  end

  # Ruby + the gem's middleware, optionally at another time (the gem reads Time.now).
  def ruby_push(tenant, at: nil)
    push = -> { @gem_client.push("class" => SomeJob, "args" => [tenant]) }
    jid = at ? Time.stub(:now, Time.at(at)) { push.call } : push.call
    queue_of(jid)
  end

  def ruby_push_many(tenant, count, at: nil)
    Array.new(count) { ruby_push(tenant, at: at) }
  end

  # `kiqd enqueue` with the same rules from its YAML.
  def kiqd_push(tenant)
    out = IO.popen([KiqdInterop::KIQD_BIN, "enqueue", "-C", @config_path, "SomeJob",
                    JSON.generate(tenant)], err: [:child, :out], &:read)
    assert $?.success?, "kiqd enqueue failed: #{out}"
    jid = out.strip
    assert_match(/\A\h{24}\z/, jid)
    queue_of(jid)
  end

  def kiqd_push_many(tenant, count)
    Array.new(count) { kiqd_push(tenant) }
  end

  def expected_minute_rule(count)
    Array.new(count) { |i| i < 10 ? "default" : "throttled_4x" }
  end

  def test_both_count_each_others_enqueues_in_one_window
    skip "#{KiqdInterop::KIQD_BIN} is not built" unless File.executable?(KiqdInterop::KIQD_BIN)
    decisions = []
    decisions += kiqd_push_many("acme", 5)
    decisions += ruby_push_many("acme", 5)
    # The 11th job within a minute: over the README's 10-per-minute rule, whoever pushes it.
    decisions << kiqd_push("acme")
    decisions << ruby_push("acme")
    decisions << kiqd_push("acme")
    assert_equal expected_minute_rule(13), decisions
    # One key, the gem's members and scores, the gem's expiry.
    members = redis.zrange(key("acme"), 0, -1, with_scores: true)
    assert_equal 13, members.size
    members.each do |member, score|
      assert_match(/\Ajid:\h{24}\z/, member)
      assert_equal score.to_i.to_f, score
      assert_in_delta Time.now.to_i, score, 60
    end
    assert_in_delta 86_400, redis.ttl(key("acme")), 60
    # The tenant is written into the job by both, as the gem does (job["fair_tenant"] ||=).
    QUEUES.each do |q|
      redis.lrange("queue:#{q}", 0, -1).each { |p| assert_equal "acme", JSON.parse(p)["fair_tenant"] }
    end
  end

  def test_hour_rule_on_history_written_by_the_other
    skip "#{KiqdInterop::KIQD_BIN} is not built" unless File.executable?(KiqdInterop::KIQD_BIN)
    # kiqd writes 100 enqueues now; Ruby decides two minutes later: 101 in the hour (> 100),
    # 1 in the minute → the first rule, throttled_2x.
    assert_equal expected_minute_rule(100), kiqd_push_many("kiqd-history", 100)
    assert_equal "throttled_2x", ruby_push("kiqd-history", at: Time.now.to_f + 120)
    now = Time.now.to_f

    # Ruby writes 100 enqueues two minutes ago; kiqd decides now: the same decision.
    assert_equal expected_minute_rule(100), ruby_push_many("ruby-history", 100, at: now - 120)
    assert_equal "throttled_2x", kiqd_push("ruby-history")
    # 9 more in this minute: still the hour rule only. The 11th in the minute matches both rules
    # and the last one (throttled_4x) wins, for both.
    assert_equal ["throttled_2x"] * 9, kiqd_push_many("ruby-history", 9)
    assert_equal "throttled_4x", ruby_push("ruby-history")
    assert_equal "throttled_4x", kiqd_push("ruby-history")
  end

  def test_each_trims_entries_the_other_wrote
    skip "#{KiqdInterop::KIQD_BIN} is not built" unless File.executable?(KiqdInterop::KIQD_BIN)
    now = Time.now.to_f
    ruby_push("old", at: now - 86_400 - 5)
    ruby_push("old", at: now - 86_400 + 600)
    assert_equal 2, redis.zcard(key("old"))
    kiqd_push("old") # trims the gem's entry older than the 1-day window, keeps the other
    scores = redis.zrange(key("old"), 0, -1, with_scores: true).map { |_, s| s.to_i }
    assert_equal 2, scores.size
    assert_equal (now - 86_400 + 600).to_i, scores[0]
    assert_in_delta Time.now.to_i, scores[1], 5
    kiqd_push("fresh")
    ruby_push("fresh", at: Time.now.to_f + 86_400 + 5) # a day later the gem trims kiqd's entry
    assert_equal 1, redis.zcard(key("fresh"))
  end

  def test_kiqd_server_reroutes_plain_ruby_pushes_and_leaves_gem_registered_jobs_alone
    rules = [{ "queue" => "throttled", "threshold" => 2, "per" => 60 }]
    plain = Sidekiq::Client.new # Debian's Sidekiq without the gem
    4.times { |i| plain.push("class" => "Test::Record", "args" => [0, "plain", i]) }
    gem_queues = Array.new(4) do |i|
      jid = @gem_client.push("class" => "Test::Record", "args" => [0, "gemmed", i],
                             "fair_tenant" => "gemmed", "fair_tenant_queues" => rules)
      redis.lrange("queue:default", 0, -1).any? { |p| JSON.parse(p)["jid"] == jid } ? "default" : "throttled"
    end
    assert_equal %w[default default throttled throttled], gem_queues
    start_kiqd({ "concurrency" => 1, "queues" => [["default", 3], ["throttled", 1]],
                 "handlers" => { "Test::Record" => { "queue" => "default",
                                                     "fair_tenant_queues" => rules,
                                                     "fair_tenant" => { "arg" => 1 } } } },
               test_daemon: true)
    wait_until(20, "all 8 jobs") { ran_records.size == 8 }
    by = ran_records.group_by { |r| r["args"][1] }.transform_values { |rs| rs.map { |r| r["queue"] }.sort }
    # kiqd's server side rerouted the plain pushes: 2 ran from default, 2 were moved first.
    assert_equal %w[default default throttled throttled], by["plain"]
    assert_equal 4, redis.zcard(key("plain", "Test::Record"))
    # The gem's registrations were not counted a second time.
    assert_equal %w[default default throttled throttled], by["gemmed"]
    assert_equal 4, redis.zcard(key("gemmed", "Test::Record"))
    assert_equal 0, Sidekiq::RetrySet.new.size
    assert_equal 0, Sidekiq::DeadSet.new.size
  end
end
