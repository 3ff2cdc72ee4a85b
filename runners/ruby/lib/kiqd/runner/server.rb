# frozen_string_literal: true

# The worker threads of a process that runs jobs, and the routing of what kiqd sends them.
# Threads: the main thread runs #run and then only waits for SIGTERM or for the workers to end;
# `threads` workers run #work, a watcher runs #watch, and a short-lived thread fires the
# lifecycle events of each `quiet`. Reading the socket is under the read lock, writing under the
# channel's write lock, the `written` mailbox under its own lock.
#
# Seats: a kiqd that takes them (the ready says "seats": true) sends a `seats` frame with a socket
# per seat attached; each gets a seat thread (#seat) that reads its jobs from that socket and
# answers on it, so no read lock changes hands per job and kiqd's thread that sent the job reads
# the answer itself. The worker threads then only read the protocol socket (`quiet`, end of file).
#
# The hot path, per job, all on one thread: #seat (or, without seats, #work through
# #next_frame, which takes the read lock) calls Channel#read_frame (channel.rb); #serve splits
# the frame's type from its tag and calls #perform, which hands the payload to Glue#run (glue.rb:
# JSON.parse, the class by name with KiqdRubyRunner.constantize from boot.rb, the job logger, the
# reloader, the middleware chain, perform); #serve then writes the answer with
# Channel#send_frame.

module KiqdRubyRunner
  # The job loop of a runner process (forked by the master, or started by kiqd itself): `threads`
  # worker threads share the socket, as Sidekiq's processor threads share a fetcher. A worker
  # takes the read lock, reads one frame, releases it, runs the job and writes the answer (the
  # channel's write lock): no hand-off between threads per job. kiqd sends at most `threads` jobs
  # at once, so while every worker runs a job nobody reads, and `quiet` would wait; a watcher
  # thread looks every QUIET_TICK and, when every worker is busy and one is still on the job it
  # had at the last look, reads in their place (and runs what it reads). Short jobs never wake
  # it, so they cost no thread switch. The main thread only waits for SIGTERM or for the threads
  # to end (end of file).
  class Server
    TERM_GRACE = 0.5 # seconds the abandoned jobs' ensure blocks get after SIGTERM
    QUIET_TICK = 0.05
    FATAL_LOCK = Mutex.new # one protocol error message, then exit (#fatal)

    def initialize(channel, glue, threads)
      @channel = channel
      @glue = glue
      @threads = threads
      @read_lock = Mutex.new
      @eof = false
      @terminating = false
      # Per worker: how many jobs it has started while it runs one, nil while it reads (an
      # element write is atomic; the watcher compares two looks).
      @running = Array.new(threads)
      # Sidekiq::Shutdown may stop a job, but not the writing of its answer (a torn frame would
      # fail every job of the process) nor what happens between the end of a job and its answer.
      @no_shutdown = {Sidekiq::Shutdown => :never}.freeze
      @shutdown_now = {Sidekiq::Shutdown => :immediate}.freeze
      # Retry decisions: jobs read by a thread that waits for its `written` (for the workers),
      # and the `written` frames by tag, for the threads that wait for them.
      @pending = []
      @mail = {}
      @mail_lock = Mutex.new
      @mail_cv = ConditionVariable.new
      @waiting = 0
      @workers = []
      @seat_sockets = []
    end

    # One seat of a kiqd that gave them: its own socket, and what a deciding failure on it does
    # (the Decider's line): `fail` with the decision, then the next frame on the seat must be
    # kiqd's `written`. Used by its seat thread alone.
    class Seat
      def initialize(channel, server)
        @channel = channel
        @server = server
      end

      def fail_and_await_written(_tag, json)
        @channel.send_frame("fail", json)
        frame = @channel.read_frame
        return if frame.nil? # end of file: kiqd is gone or stopped this process
        @server.fatal("a '#{frame[0]}' frame on a seat that waits for 'written'") unless frame[0] == "written"
      end
    end

    # A deciding job's failure: sends `fail TAG` with the decision, then waits until kiqd says
    # `written TAG` (or closes the socket). Whoever reads the socket meanwhile hands the frame
    # over; with nobody reading, this thread reads.
    def fail_and_await_written(tag, json)
      @mail_lock.synchronize do
        @mail[tag] = nil
        @waiting += 1
      end
      @channel.send_frame("fail #{tag}", json)
      loop do
        @mail_lock.synchronize { return if @mail[tag] || @eof }
        if @read_lock.try_lock
          begin
            next if @mail_lock.synchronize { @mail[tag] }
            frame = @channel.read_frame
            if frame.nil?
              end_of_file
            elsif (work = route(frame))
              @pending << work
            end
          ensure
            @read_lock.unlock
          end
        else
          @mail_lock.synchronize { @mail_cv.wait(@mail_lock, QUIET_TICK) unless @mail[tag] || @eof }
        end
      end
    ensure
      @mail_lock.synchronize do
        @mail.delete(tag)
        @waiting -= 1
      end
    end

    def run
      @channel.blocking!
      wake_r, wake_w = IO.pipe
      trap("TERM") { wake_w.write_nonblock("t", exception: false) }
      # As `sidekiq` does once the application is booted, before the first job; a startup
      # handler that raises ends the process here, which kiqd reports as a failed boot.
      @glue.lifecycle.startup
      @channel.accept_fds!
      @wake_w = wake_w
      @channel.send_json("ready", KiqdRubyRunner.greeting("threads" => @threads, "seats" => true))
      @glue.lifecycle.start_beats
      # Seat threads join @workers when the seats come (#route).
      @threads.times { |slot| @workers << thread(wake_w) { work(slot) } }
      @workers << thread(wake_w) { watch }
      # A thread of #thread says "e" from its ensure, while it is still alive: it marks itself
      # ended first, so that the last one to go is seen as done (asking alive? alone can miss it
      # and wait for ever).
      loop do
        IO.select([wake_r])
        bytes = wake_r.read_nonblock(64, exception: false)
        terminate(@workers) if bytes.is_a?(String) && bytes.include?("t")
        break if @workers.all? { |t| t[:kiqd_ended] || !t.alive? }
      end
      @workers.each { |t| settle(t) }
      # End of file: kiqd stopped or recycled this process, and its jobs are answered.
      stop_events
      @glue.lifecycle.exit
    end

    private

    def thread(wake_w)
      Thread.new do
        Thread.current.report_on_exception = false
        Thread.current[:sidekiq_capsule] = @glue.capsule if @glue.capsule # Sidekiq.redis: its pool
        yield
      rescue Sidekiq::Shutdown
        nil
      rescue Exception => e # rubocop:disable Lint/RescueException
        fatal("#{e.class}: #{e.message}")
      ensure
        Thread.current[:kiqd_ended] = true # nothing more runs here: see #run
        wake_w.write_nonblock("e", exception: false)
      end
    end

    def work(slot)
      started = 0
      while (frame = next_frame)
        @running[slot] = (started += 1)
        serve(frame)
        @running[slot] = nil
        break if @terminating
      end
    end

    # A seat's jobs, one at a time, until kiqd closes the seat (or the process).
    def seat(io)
      channel = Channel.new(io)
      channel.blocking!
      line = Seat.new(channel, self)
      while (frame = channel.read_frame)
        serve(frame, channel, line)
        break if @terminating
      end
    ensure
      io.close unless @terminating # SIGTERM's Process.exit! closes it with the rest
    end

    def watch
      last = nil
      until @eof || @terminating
        sleep QUIET_TICK
        now = @running.dup
        if last && now.all? && now.zip(last).any? { |a, b| a == b }
          frame = next_frame or break
          serve(frame)
          now = nil
        end
        last = now
      end
    end

    # Runs one frame and answers it with its tag (untagged for an untagged frame), on the
    # protocol socket or on the seat it came on.
    def serve(frame, channel = @channel, seat = nil)
      type, data = frame
      kind, tag = type.split(" ", 2)
      Thread.handle_interrupt(@no_shutdown) do
        reply = Thread.handle_interrupt(@shutdown_now) { perform(kind, type, data, tag, seat) }
        channel.send_frame(tag ? "#{reply[0]} #{tag}" : reply[0], reply[1]) if reply
      end
    end

    # The next job or exhausted frame; `quiet` is taken here. nil at end of file, for every thread.
    def next_frame
      frame = @read_lock.synchronize do
        loop do
          break nil if @eof || @terminating
          break @pending.shift unless @pending.empty?
          frame = @channel.read_frame
          if frame.nil?
            end_of_file
          elsif (work = route(frame))
            break work
          end
        end
      end
      # A thread waiting for its `written` may read now (or stop waiting at end of file).
      @mail_lock.synchronize { @mail_cv.broadcast } if @waiting > 0
      frame
    end

    # kiqd closed the protocol socket (it stopped or recycled this process, or it is gone): no
    # new job comes, on any seat either. The seats' reading sides are shut, so that their
    # threads end once their job is answered. The read lock is held.
    def end_of_file
      @eof = true
      @seat_sockets.each { |s| s.shutdown(Socket::SHUT_RD) rescue nil } # rubocop:disable Style/RescueModifier
    end

    # A frame that is not a job's: `quiet` is taken, a `written` goes to the thread that waits
    # for it; a job (or exhausted call) is returned for a worker. The read lock is held.
    def route(frame)
      type = frame[0]
      if type == "seats"
        # One seat thread per socket. Appended under the read lock; the main thread only reads
        # the list.
        count = Integer(JSON.parse(frame[1])["count"])
        ios = @channel.take_fds(count)
        fatal("a 'seats' frame for #{count} sockets came with #{ios.size}") unless ios.size == count
        ios.each do |io|
          sock = Socket.for_fd(io.fileno) # a socket, for #end_of_file's shutdown
          io.autoclose = false
          @seat_sockets << sock
          @workers << thread(@wake_w) { seat(sock) }
        end
        nil
      elsif type == "quiet"
        @glue.stopping.stop!
        # Fired beside the job threads (Sidekiq's launcher fires them on its own thread):
        # `quiet`, and `shutdown` too when kiqd is stopping.
        shutdown = frame[1].include?('"shutdown":true')
        Thread.new { shutdown ? stop_events : @glue.lifecycle.quiet }
        nil
      elsif type.start_with?("written ")
        tag = type.split(" ", 2)[1]
        @mail_lock.synchronize do
          fatal("a 'written' frame for tag #{tag}, which waits for nothing") unless @mail.key?(tag)
          @mail[tag] = frame
          @mail_cv.broadcast
        end
        nil
      else
        frame
      end
    end

    def perform(kind, type, data, tag, seat = nil)
      case kind
      when "job" then @glue.run(data, decider(tag, seat))
      when "exhausted" then @glue.exhausted(data)
      else fatal("unknown frame #{type.inspect}")
      end
    end

    # Who a failure's decision goes to: the job's seat, or the protocol socket with its tag.
    def decider(tag, seat)
      return nil unless @glue.decisions?
      return Decider.new(seat, nil, @glue) if seat
      tag && Decider.new(self, tag, @glue)
    end

    # SIGTERM: the running jobs get Sidekiq::Shutdown (their ensure blocks run; they answer
    # nothing), a moment to unwind, and the process exits: kiqd requeues them once it is gone.
    def terminate(workers)
      @terminating = true
      @glue.stopping.stop!
      stop_events
      workers.each { |t| t.raise(Sidekiq::Shutdown) if t.alive? }
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + TERM_GRACE
      workers.each { |t| settle(t, [deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC), 0].max) }
      @glue.lifecycle.exit
      Process.exit!(0)
    end

    # Waits for a worker thread to end. Thread#join raises in the caller whatever the thread ended
    # with, and a worker can end with an exception its own rescue never saw: Sidekiq::Shutdown from
    # #terminate arriving while it runs its ensure. The main thread must go on to the `exit` event
    # and a clean exit all the same.
    def settle(thread, timeout = nil)
      thread.join(timeout)
    rescue Exception # rubocop:disable Lint/RescueException
      nil
    end

    # Sidekiq's stop: `quiet` (unless it fired already), then `shutdown`; each fires once.
    def stop_events
      @glue.lifecycle.quiet
      @glue.lifecycle.shutdown
    end

    public

    # A protocol error: the process exits, kiqd fails the jobs it held and replaces it. Several
    # threads can meet the same error (a bad length stays at the head of the shared read buffer),
    # so the first one says it and exits; the others wait on the lock until the process is gone.
    def fatal(message)
      FATAL_LOCK.synchronize do
        $stderr.puts "kiqd-ruby-runner: #{message}"
        Process.exit!(2)
      end
    end
  end
end
