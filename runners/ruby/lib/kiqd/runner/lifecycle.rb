# frozen_string_literal: true

# The application's lifecycle events and the `stopping?` flag its jobs see. Fired as under
# `sidekiq`, in each process that runs jobs: `startup` once it is booted (a forked child: after
# the fork), `heartbeat` and `beat` at once and `beat` every heartbeat after (Sidekiq's
# interval), `quiet` on kiqd's `quiet`, `shutdown` on SIGTERM or end of file, and on 8.x `exit`
# last. Threads: the main thread fires startup and exit, a beat thread of its own fires `beat`,
# the thread that reads `quiet` starts one that fires quiet/shutdown; the lock keeps each
# one-shot event to one firing. Stopping is set by whoever takes `quiet` or SIGTERM and read by
# the job threads.

module KiqdRubyRunner
  # The `_context` Sidekiq 7.x/8.x's processor gives each job instance: an iterable job asks it
  # `stopping?` between iterations. True once kiqd sent `quiet` or SIGTERM arrived.
  class Stopping
    def initialize = @stopping = false
    def stop! = @stopping = true
    def stopping? = @stopping
  end

  # The application's lifecycle events (`config.on(:startup)` ...), fired through Sidekiq's own
  # fire_event (6.x: Sidekiq::Util, 7.x/8.x: Sidekiq::Component), so they run in Sidekiq's order
  # (quiet and shutdown in reverse), once each, with an exception handed to the error handlers
  # (and, for startup, raised: the process fails to boot, as `sidekiq` would). Only the events
  # the version knows fire (6.x has no `beat`, 8.x adds `exit`).
  class Lifecycle
    BEAT_PAUSE = {6 => 5, 7 => 10, 8 => 10}.freeze # Sidekiq's heartbeat interval, in seconds

    def initialize(major)
      @major = major
      @emitter = Object.new
      if major >= 7
        @emitter.extend(Sidekiq::Component)
        @emitter.instance_variable_set(:@config, Sidekiq.default_configuration)
        @events = Sidekiq.default_configuration[:lifecycle_events]
      else
        @emitter.extend(Sidekiq::Util)
        @events = Sidekiq.options[:lifecycle_events]
      end
      @lock = Mutex.new
      @fired = {}
    end

    def startup = fire(:startup, reverse: false, reraise: true)
    def quiet = fire(:quiet, reverse: true)
    def shutdown = fire(:shutdown, reverse: true)
    def exit = fire(:exit, reverse: true)

    # The first heartbeat's `heartbeat` and `beat` now, then `beat` every BEAT_PAUSE seconds on
    # a thread of its own until the process ends.
    def start_beats
      fire(:heartbeat)
      fire(:beat, oneshot: false)
      return unless @events.key?(:beat)
      Thread.new do
        Thread.current.report_on_exception = false
        loop do
          sleep BEAT_PAUSE.fetch(@major, 10)
          fire(:beat, oneshot: false)
        end
      end
    end

    private

    def fire(event, **options)
      return unless @events.key?(event)
      oneshot = options.fetch(:oneshot, true)
      @lock.synchronize do
        return if oneshot && @fired[event]
        @fired[event] = true if oneshot
        # 6.x's fire_event takes no :oneshot (its `beat`-less events are all one-shot).
        @emitter.fire_event(event, @major >= 7 ? options : options.except(:oneshot))
      end
    rescue Exception => e # rubocop:disable Lint/RescueException
      raise if options[:reraise]
      warn "kiqd-ruby-runner: the #{event} event raised #{e.class}: #{e.message}"
    end
  end
end
