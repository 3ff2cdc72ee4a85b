# frozen_string_literal: true

# sidekiq-throttled's admission check, made before each job when the application uses the gem
# (Glue#run calls it first, on the job's worker thread). The gem's own keys, scripts and requeue,
# so that Ruby Sidekiq processes and kiqd share one limit.

module KiqdRubyRunner
  class Glue
    # A fetched job as sidekiq-throttled's requeue sees one (BasicFetch's UnitOfWork): `queue`
    # is the list's key. kiqd acknowledges it after the `throttled` answer.
    ThrottledWork = Struct.new(:queue, :job, :config) do
      def queue_name = queue.delete_prefix("queue:")
      def acknowledge = nil
      def requeue = Sidekiq.redis { |conn| conn.rpush(queue, job) }
    end

    # sidekiq-throttled, where the app uses it: the gem's own admission check, made where its
    # fetch patch makes it (right after the fetch, before anything runs), with the gem's keys and
    # scripts, so that Ruby Sidekiq processes and kiqd share one limit. A job it does not admit is
    # handed back by the gem's own requeue (`requeue: {with:, to:}`), and kiqd is answered
    # `throttled`, with the seconds to rest the queue when the gem's cooldown says so. Its server
    # middleware (the app's chain) finalizes an admitted job when it ends. nil: run the job.
    def throttle_check(raw)
      @throttled = defined?(Sidekiq::Throttled) && Sidekiq::Throttled.respond_to?(:throttled?) if @throttled.nil?
      return nil unless @throttled
      queue = "queue:#{JSON.parse(raw)["queue"]}"
      cooldown = Sidekiq::Throttled.cooldown
      unless Sidekiq::Throttled.throttled?(raw)
        cooldown&.notify_admitted(queue)
        return nil
      end
      cooldown&.notify_throttled(queue)
      Sidekiq::Throttled.requeue_throttled(ThrottledWork.new(queue, raw, @config))
      rest = cooldown&.queues&.include?(queue) ? Sidekiq::Throttled.config.cooldown_period.to_f : nil
      ["throttled", JSON.generate(rest ? {"rest" => rest} : {})]
    rescue JSON::ParserError
      nil # not a job the gem can read: it runs (and fails) as usual
    rescue StandardError => e
      # The gem could not hand it back (Redis refused the push): kiqd retries it as a failure,
      # so that it is not lost.
      report(e, {}, raw)
      ["fail", failure_json(e, {}, raw, nil)]
    end
  end
end
