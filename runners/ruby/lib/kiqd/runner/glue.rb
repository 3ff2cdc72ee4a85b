# frozen_string_literal: true

# Glue: what the runner takes from the application's Sidekiq (6.x, 7.x and 8.x) and how one job
# runs in it, as the version's processor runs it: the job logger's context, the reloader, the
# class resolved by name (an ActiveJob payload names the adapter's wrapper), jid and the
# iteration context set, the server middleware chain around perform(*args). Built once on the
# main thread after boot (in a master, before the forks); #run is then called by every worker
# thread at once, so nothing here changes after construction (but throttle.rb's memo, which any
# thread sets to the same value). #run is the hot path's last step
# (Server#serve calls it for each job). Its failure side is in failures.rb, sidekiq-throttled's
# check in throttle.rb.

module KiqdRubyRunner
  # What the runner takes from the application's Sidekiq, per major version. 6.x: Sidekiq.options,
  # Sidekiq.server_middleware, Sidekiq.death_handlers / error_handlers. 7.x: the default
  # configuration and its default capsule (whose Redis pool and middleware copy the processor
  # threads use). 8.x: the default configuration (its processor uses the config's own chain).
  # Built once after boot (in a master, before the forks); read by every worker thread.
  class Glue
    attr_reader :major, :capsule, :stopping, :lifecycle

    def self.before_boot(threads)
      # Sidekiq sizes its Redis pools from the concurrency (6.x: concurrency + 5 connections,
      # 7.x/8.x: the capsule's pool has one per processor thread); set before the application
      # boots, which may use the pool.
      if Sidekiq::VERSION.to_i >= 7
        Sidekiq.default_configuration.concurrency = threads
      else
        Sidekiq.options[:concurrency] = threads
      end
    end

    def initialize(threads)
      @major = Sidekiq::VERSION.to_i
      @stopping = Stopping.new
      if @major >= 7
        @config = Sidekiq.default_configuration
        @capsule = @config.default_capsule
        @capsule.concurrency = threads if @capsule.concurrency < threads
        @middleware = @major == 7 ? @capsule.server_middleware : @config.server_middleware
        @job_logger = (@config[:job_logger] || Sidekiq::JobLogger).new(@config)
        @backtrace_cleaner = @config[:backtrace_cleaner]
      else
        @config = Sidekiq.options
        @capsule = nil
        @middleware = Sidekiq.server_middleware
        @job_logger = (@config[:job_logger] || Sidekiq::JobLogger).new
        @backtrace_cleaner = nil
      end
      @reloader = @config[:reloader] || proc { |&block| block.call }
      @skip = defined?(Sidekiq::JobRetry::Skip) ? Sidekiq::JobRetry::Skip : nil
      # kiqd records every job's execution metrics (7.x/8.x's); Sidekiq's own tracker would count
      # each runner job a second time once `beat` flushes it.
      @middleware.remove(Sidekiq::Metrics::Middleware) if defined?(Sidekiq::Metrics::Middleware)
      @lifecycle = Lifecycle.new(@major)
      @retrier = deciding_retrier if ENV["KIQD_RUNNER_DECISIONS"] == "1"
    end

    def decisions? = !@retrier.nil?

    # Runs one job as the version's Processor#dispatch and #process do, without what kiqd does
    # itself (fetch, acknowledge, stats, retries). Returns ["done", "{}"] or ["fail", json], or
    # nil when Sidekiq::Shutdown abandoned it (nothing is answered; kiqd requeues it).
    def run(raw, decider = nil)
      if (answer = throttle_check(raw))
        return answer
      end
      return run_deciding(raw, decider) if decider && @retrier
      job = instance = nil
      job = JSON.parse(raw)
      queue = job["queue"]
      @job_logger.prepare(job) do
        @reloader.call do
          instance = job_instance(job)
          @middleware.invoke(instance, job, queue) do
            instance.perform(*job["args"])
          end
        end
      end
      DONE
    rescue Sidekiq::Shutdown
      nil
    rescue Exception => e # rubocop:disable Lint/RescueException -- as Sidekiq's processor does
      return nil if caused_by_shutdown?(e)
      return DONE if @skip && e.is_a?(@skip) # handled by a middleware (an interrupted iteration)
      report(e, job || {}, raw)
      ["fail", failure_json(e, job || {}, raw, instance)]
    end

    DONE = ["done", "{}"].freeze

    # A job inside Sidekiq's own JobRetry, as the version's Processor#process runs it (global
    # around the job, local around the instance): a failure is decided, written through kiqd
    # (Decider) and handed to the death handlers by Sidekiq's code; the error handlers run after
    # it, as in the processor's `rescue Handled`.
    def run_deciding(raw, decider)
      job = JSON.parse(raw)
      queue = job["queue"]
      Thread.current[:kiqd_decider] = decider
      @job_logger.prepare(job) do
        @retrier.global(raw, queue) do
          @reloader.call do
            instance = job_instance(job)
            @retrier.local(instance, raw, queue) do
              @middleware.invoke(instance, job, queue) do
                instance.perform(*job["args"])
              end
            end
          end
        end
      end
      DONE
    rescue Sidekiq::Shutdown
      nil
    rescue Sidekiq::JobRetry::Handled => h
      # 7.x/8.x: Skip is a job handled elsewhere (an interrupted iteration): nothing to report.
      # 6.x's local raises Skip for every failure it filed, and its processor reports them.
      return DONE if @major >= 7 && h.is_a?(Sidekiq::JobRetry::Skip)
      e = h.cause || h
      report(e, job, raw)
      return DONE if decider.wrote # kiqd wrote it and waits for this `done`
      body = error_fields(e).merge("decision" => "discard")
      ["fail", JSON.generate(body)]
    rescue Exception => e # rubocop:disable Lint/RescueException -- as the processor does
      # Outside JobRetry (a payload that is not JSON): kiqd decides, as without decisions.
      return nil if caused_by_shutdown?(e)
      report(e, job || {}, raw)
      ["fail", failure_json(e, job || {}, raw, nil)]
    ensure
      Thread.current[:kiqd_decider] = nil
    end

    private

    # A new instance of the job's class, as Sidekiq's processor makes one: its jid, and the
    # context iterable jobs ask `stopping?` of.
    def job_instance(job)
      instance = KiqdRubyRunner.constantize(job["class"].to_s).new
      instance.jid = job["jid"] if instance.respond_to?(:jid=)
      instance._context = @stopping if instance.respond_to?(:_context=)
      instance
    end

    # The version's JobRetry, as its processor makes it, with the Redis writes handed to kiqd.
    def deciding_retrier
      klass = Class.new(Sidekiq::JobRetry) { prepend DecidingRetry }
      retrier = case @major
                when 6
                  Sidekiq.singleton_class.prepend(SidekiqRedisForRetry)
                  klass.new
                else klass.new(@capsule)
                end
      if (max = ENV["KIQD_RUNNER_MAX_RETRIES"]) && max.match?(/\A\d+\z/)
        retrier.instance_variable_set(:@max_retries, max.to_i) # kiqd's config wins
      end
      retrier
    end

    def caused_by_shutdown?(e, seen = {})
      cause = e.cause
      return false if cause.nil? || seen[cause.object_id]
      seen[e.object_id] = true
      cause.instance_of?(Sidekiq::Shutdown) || caused_by_shutdown?(cause, seen)
    end
  end
end
