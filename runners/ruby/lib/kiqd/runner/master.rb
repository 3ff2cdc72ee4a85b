# frozen_string_literal: true

# The forking master (KIQD_RUNNER_PRELOAD=1, no --no-preload): it boots the application once,
# runs no job, and forks a child per `fork` frame kiqd sends, handing it the socket and pipes
# kiqd sent along, so the children share the boot copy-on-write. Its main thread does it all;
# a CHLD trap only wakes it. Also the fork hooks the application may register, and what ties a
# child's life to the master's.

require "socket"

module KiqdRubyRunner
  module_function

  # Hooks the application may register (in the file it --requires), as with a preforking web
  # server: before_fork runs once in the master after boot, after_fork in each forked child.
  @before_fork = []
  @after_fork = []
  class << self
    def before_fork(&block) = @before_fork << block
    def after_fork(&block) = @after_fork << block
  end

  # prctl(PR_SET_PDEATHSIG, SIGKILL) through Fiddle: a forked child dies with its master, which
  # dies with kiqd (kiqd sets the same on the master). Without Fiddle, a thread watches the
  # parent pid instead.
  def die_with_parent(parent)
    begin
      require "fiddle"
      prctl = Fiddle::Function.new(Fiddle::Handle::DEFAULT["prctl"],
                                   [Fiddle::TYPE_INT, Fiddle::TYPE_LONG, Fiddle::TYPE_LONG, Fiddle::TYPE_LONG, Fiddle::TYPE_LONG],
                                   Fiddle::TYPE_INT)
      raise "prctl failed" unless prctl.call(1, Signal.list.fetch("KILL"), 0, 0, 0).zero? # PR_SET_PDEATHSIG
    rescue StandardError, LoadError, Fiddle::DLError
      Thread.new do
        loop do
          Process.exit!(1) if Process.ppid != parent
          sleep 1
        end
      end
    end
    # The master may have died between fork and prctl; then nothing would signal this child.
    Process.exit!(1) if Process.ppid != parent
  end

  # Before the first fork: what the master holds that its children must not share. Sidekiq's
  # Redis connections (redis-rb refuses a connection inherited over fork) and Active Record's.
  def prepare_fork
    begin
      require "fiddle" # once here, shared by every child (die_with_parent)
    rescue LoadError
      nil
    end
    @before_fork.each(&:call)
    Sidekiq.redis_pool.reload(&:close) if Sidekiq.respond_to?(:redis_pool) && Sidekiq.redis_pool.respond_to?(:reload)
    if Sidekiq.respond_to?(:default_configuration) # 7.x/8.x: each capsule has its own pool
      Sidekiq.default_configuration.capsules.each_value { |c| c.redis_pool.reload(&:close) }
    end
    ActiveRecord::Base.connection_handler.clear_all_connections! if defined?(ActiveRecord::Base)
    GC.start
    GC.compact if GC.respond_to?(:compact) # fewer pages touched after fork: more stay shared
  rescue StandardError => e
    warn "kiqd-ruby-runner: preparing to fork: #{e.class}: #{e.message}"
  end

  # The master (preload): boots the application once, answers ready with "preload": true, then
  # forks a child for each `fork` frame kiqd sends. The frame carries, as SCM_RIGHTS, the child's
  # protocol socket and its stdout and stderr; the master answers `forked` with the child's pid,
  # and `exited` with its wait status once it has reaped it.
  def master(ctl, opts, threads)
    glue = boot(opts, threads)
    prepare_fork
    channel = Channel.new(ctl)
    channel.send_json("ready", greeting("preload" => true))
    wake_r, wake_w = IO.pipe
    trap("CHLD") { wake_w.write_nonblock(".", exception: false) }
    buf = "".b
    fds = []
    me = Process.pid
    loop do
      ready = IO.select([ctl, wake_r])
      if ready[0].include?(wake_r)
        wake_r.read_nonblock(4096, exception: false)
        while (reaped = Process.wait2(-1, Process::WNOHANG))
          pid, status = reaped
          # The raw wait status, as kiqd's own waitpid would have it.
          raw = status.signaled? ? status.termsig : ((status.exitstatus || 0) << 8)
          channel.send_json("exited", {"pid" => pid, "status" => raw})
        end rescue Errno::ECHILD
      end
      next unless ready[0].include?(ctl)
      data, _addr, _flags, *controls = ctl.recvmsg(65536, 0, 1024, scm_rights: true)
      break if data.nil? || data.empty? # kiqd closed the socket: its children are gone already
      controls.each { |c| fds.concat(c.unix_rights || []) if c.cmsg_is?(:SOCKET, :RIGHTS) }
      buf << data
      while buf.bytesize >= 4 && buf.bytesize >= 4 + (len = buf.unpack1("N"))
        body = buf.byteslice(4, len)
        buf = buf.byteslice(4 + len, buf.bytesize) || "".b
        type, req = body.split("\n", 2)
        exit 2 unless type == "fork"
        sock, out, err = fds.shift(3)
        exit 2 unless err
        pid = fork do
          trap("CHLD", "DEFAULT")
          wake_r.close
          wake_w.close
          Process.setpgid(0, 0)
          die_with_parent(me)
          ctl.reopen(sock) # fd 3 (KIQD_RUNNER_FD) is now this child's socket
          sock.close
          $stdout.reopen(out)
          $stderr.reopen(err)
          $stdout.sync = $stderr.sync = true # reopen does not keep it; exit! flushes nothing
          out.close
          err.close
          @after_fork.each(&:call)
          Server.new(Channel.new(ctl), glue, threads).run
          exit!(0)
        end
        [sock, out, err].each(&:close)
        channel.send_json("forked", JSON.parse(req).merge("pid" => pid))
      end
    end
  end
end
