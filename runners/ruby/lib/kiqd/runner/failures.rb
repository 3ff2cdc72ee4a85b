# frozen_string_literal: true

# Glue's failure side: what a failed job is answered (`fail` with class, message, backtrace and
# what sidekiq_retry_in says), the application's error and death handlers, and the hooks of a
# job whose retries kiqd found exhausted (`exhausted`). Runs on the worker thread of the job
# concerned. Whatever an exception or a hook does, the process never goes down over it.

module KiqdRubyRunner
  class Glue
    # class, message and backtrace of a failure, as the `fail` answer carries them; never raises.
    def error_fields(e)
      backtrace = safely { e.backtrace } || []
      backtrace = (safely { @backtrace_cleaner.call(backtrace) } || backtrace) if @backtrace_cleaner
      {"class" => utf8(safely { e.class.name } || "Exception"),
       "message" => utf8(safely { e.message.to_s } || "(#{e.class}#message raised)"),
       "backtrace" => Array(backtrace).map { |l| utf8(l.to_s) }}
    rescue Exception # rubocop:disable Lint/RescueException
      {"class" => "Exception", "message" => "(unreadable)", "backtrace" => []}
    end

    # kiqd sent the job to the dead set (or dropped it, "dead": false): what the version's
    # JobRetry#retries_exhausted calls around its own morgue write. A job with `retry: false`
    # takes Sidekiq's other path: death handlers only.
    def exhausted(data)
      req = JSON.parse(data)
      msg = req["job"] || {}
      exception = exception_from(req["error"] || {})
      run_exhausted(msg, exception)
    rescue Exception => e # rubocop:disable Lint/RescueException -- no hook may end the process
      warn "kiqd-ruby-runner: the retries-exhausted call raised #{e.class}: #{e.message}"
      DONE
    end

    def run_exhausted(msg, exception)
      @job_logger.prepare(msg) do
        @reloader.call do
          rv = nil
          unless msg["retry"] == false
            block = hook(msg, :sidekiq_retries_exhausted_block)
            begin
              rv = block&.call(msg, exception)
            rescue Exception => e # rubocop:disable Lint/RescueException -- a hook cannot end the process
              warn "kiqd-ruby-runner: sidekiq_retries_exhausted of #{msg["class"]} raised #{e.class}: #{e.message}"
            end
          end
          # 7.x: a block returning :discard skips the death handlers; 8.x runs them anyway.
          death(msg, exception) unless rv == :discard && @major == 7
        end
      end
      DONE
    end

    private

    def death(msg, exception)
      @config[:death_handlers].each do |handler|
        handler.call(msg, exception)
      rescue Exception => e # rubocop:disable Lint/RescueException -- a handler cannot end the process
        warn "kiqd-ruby-runner: a death handler raised #{e.class}: #{e.message}"
      end
    end

    # The class's block (the instance's in 6.x, where a wrapper's is its own; in 7.x/8.x an
    # ActiveJob's `wrapped` class holds it).
    def hook(msg, name, instance = nil)
      if @major >= 7 && msg["wrapped"]
        wrapped = begin
          KiqdRubyRunner.constantize(msg["wrapped"].to_s)
        rescue NameError
          nil
        end
        return wrapped.respond_to?(name) ? wrapped.public_send(name) : nil
      end
      instance ||= begin
        KiqdRubyRunner.constantize(msg["class"].to_s).new
      rescue Exception # rubocop:disable Lint/RescueException
        nil
      end
      instance.respond_to?(name) ? instance.public_send(name) : nil
    end

    # The application's error handlers, as the processor's handle_exception calls them for a
    # failed job, without Sidekiq's default one (it logs the error, which kiqd does already).
    def report(ex, job, raw)
      handlers = @config[:error_handlers]
      return if handlers.nil? || handlers.empty?
      ctx = {context: "Job raised exception", job: job}
      ctx[:jobstr] = raw if @major < 7
      handlers.each do |h|
        next if default_error_handler?(h)
        if @major >= 8
          h.call(ex, ctx, @config)
        elsif @major == 7 && (h.is_a?(Proc) ? h : h.method(:call)).parameters.size == 2
          h.call(ex, {_config: @config}.merge(ctx))
        elsif @major == 7
          h.call(ex, ctx, @config)
        else
          h.call(ex, ctx)
        end
      rescue Exception => e # rubocop:disable Lint/RescueException -- a handler cannot end the process
        warn "kiqd-ruby-runner: an error handler raised #{e.class}: #{e.message}"
      end
    end

    def default_error_handler?(h)
      if @major >= 7
        h.equal?(Sidekiq::Config::ERROR_HANDLER)
      else
        defined?(Sidekiq::ExceptionHandler::Logger) && h.is_a?(Sidekiq::ExceptionHandler::Logger)
      end
    end

    # The `fail` answer's JSON. Whatever the exception does (a `message` that raises, a class
    # without a name, a backtrace of odd objects, text that is not UTF-8), the job fails as
    # itself with a readable class and message; the process never goes down over it.
    def failure_json(e, job, raw, instance)
      JSON.generate(failure(e, job, raw, instance))
    rescue Exception => fe # rubocop:disable Lint/RescueException
      JSON.generate("class" => utf8(safely { e.class.name } || "Exception"),
                    "message" => utf8(safely { e.message.to_s } ||
                                      "(its message could not be read: #{fe.class})"),
                    "backtrace" => [])
    end

    def safely
      yield
    rescue Exception # rubocop:disable Lint/RescueException
      nil
    end

    def failure(e, job, raw, instance)
      backtrace = safely { e.backtrace } || []
      backtrace = @backtrace_cleaner.call(backtrace) || backtrace if @backtrace_cleaner
      out = {
        "class" => e.class.name || e.class.to_s,
        "message" => utf8(safely { e.message.to_s } || "(#{e.class}#message raised)"),
        "backtrace" => Array(backtrace).map { |l| utf8(l.to_s) }
      }
      retry_in = retry_in(e, job, raw, instance)
      out["retry_in"] = retry_in if retry_in
      out
    end

    def utf8(s) = s.dup.force_encoding(Encoding::UTF_8).scrub

    # What the version's JobRetry#delay_for makes of sidekiq_retry_in: 6.x calls it with (count,
    # exception) and takes a positive integer; 7.x/8.x with (count, exception, job) and also take
    # :kill (straight to the dead set) and :discard (8.x: the death handlers run for it).
    # count is the retry count after this failure (0 for the first).
    def retry_in(e, job, raw, instance)
      block = hook(job, :sidekiq_retry_in_block, instance)
      return nil unless block
      msg = failed_msg(raw, e)
      rv = begin
        @major >= 7 ? block.call(msg["retry_count"], e, msg) : block.call(msg["retry_count"], e)
      rescue Exception => re # rubocop:disable Lint/RescueException -- as delay_for does
        warn "kiqd-ruby-runner: sidekiq_retry_in of #{job["class"]} raised #{re.class}: #{re.message}; using the default delay"
        return nil
      end
      if @major >= 7 && (rv == :kill || rv == :discard)
        death(msg.merge("discarded_at" => now_ms), e) if rv == :discard && @major >= 8
        return rv.to_s
      end
      rv = rv.to_i if rv.respond_to?(:to_i)
      rv.is_a?(Integer) && rv > 0 ? rv : nil
    end

    # The job as JobRetry#process_retry has it when it calls sidekiq_retry_in.
    def failed_msg(raw, e)
      msg = JSON.parse(raw)
      msg["queue"] = msg["retry_queue"] || msg["queue"]
      msg["error_message"] = utf8(e.message.to_s[0, 10_000])
      msg["error_class"] = e.class.name
      now = @major >= 8 ? now_ms : Time.now.to_f
      if msg["retry_count"]
        msg["retried_at"] = now
        msg["retry_count"] += 1
      else
        msg["failed_at"] = now
        msg["retry_count"] = 0
      end
      msg
    end

    def now_ms = ::Process.clock_gettime(::Process::CLOCK_REALTIME, :millisecond)

    # An exception of the job's error class with its message, for the hooks of a job whose
    # retries kiqd found exhausted. The class's own constructor may want other arguments
    # (ApiError.new(response), ActiveRecord::RecordInvalid.new(record)) or raise: then the
    # object is made without it, Exception#initialize setting the message, so the hooks still
    # see the class they rescue.
    def exception_from(error)
      message = error["message"].to_s
      klass = safely { KiqdRubyRunner.constantize(error["class"].to_s) }
      klass = RuntimeError unless klass.is_a?(Class) && klass <= Exception
      safely { klass.new(message) } ||
        safely { klass.allocate.tap { |ex| Exception.instance_method(:initialize).bind_call(ex, message) } } ||
        RuntimeError.new("#{error["class"]}: #{message}")
    end
  end
end
