# A private redis-server for a Ruby test suite (the interop suite, the runner protocol test and
# the runner library's unit tests): a free 127.0.0.1 port, the server started there with no
# persistence, and a wait until that port answers as *this* server. A port picked free can be
# taken by another suite's server before ours binds it; ours then exits, and a wait for any
# answer on the port would let the test run against a stranger. The check speaks RESP itself,
# because the test worlds' Redis clients differ. The caller stops the server by its PID.
require "socket"

module TestRedis
  module_function

  def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  def free_port
    s = TCPServer.new("127.0.0.1", 0)
    s.addr[1]
  ensure
    s&.close
  end

  # Starts redis-server on 127.0.0.1:port without persistence and returns its pid. `args` are
  # more server arguments; `opts` go to Process.spawn (out:, err:, chdir:).
  def spawn(port, *args, **opts)
    Process.spawn("redis-server", "--port", port.to_s, "--bind", "127.0.0.1", "--save", "",
                  "--appendonly", "no", *args,
                  **{ in: File::NULL, out: File::NULL, err: File::NULL }.merge(opts))
  end

  # A server for a whole Minitest run (the runner protocol test, the runner unit tests): started
  # now, stopped by its PID after the last test; returns its URL.
  def start_for_run(timeout: 60)
    port = free_port
    pid = spawn(port)
    Minitest.after_run do
      Process.kill("TERM", pid)
      Process.wait(pid)
    end
    await(port, pid, timeout: timeout)
    "redis://127.0.0.1:#{port}/0"
  end

  # Returns once the server on `port` reports `pid` as its process_id. Raises when `exited`
  # returns true (by default: the process is gone or a zombie; it is not reaped here, so the
  # caller still stops it by its PID) or after `timeout` seconds (a deadline for a hung start on
  # a loaded machine, not a measure of anything).
  def await(port, pid, timeout: 60, exited: -> { !running?(pid) })
    deadline = now + timeout
    until server_pid(port) == pid
      raise "redis-server (pid #{pid}) on port #{port} exited" if exited.call
      raise "redis-server (pid #{pid}) did not answer on port #{port} in #{timeout} s" if now > deadline

      sleep 0.02
    end
  end

  # The process_id that the server on `port` reports (INFO server), or nil while none answers.
  def server_pid(port)
    s = TCPSocket.new("127.0.0.1", port)
    s.write("INFO server\r\n")
    len = s.gets("\r\n").to_s.delete_prefix("$").to_i # an error reply (-LOADING) reads as 0
    s.read(len).to_s[/^process_id:(\d+)/, 1]&.to_i
  rescue SystemCallError, IOError
    nil
  ensure
    s&.close
  end

  # Whether `pid` runs: not gone, not a zombie. Read from /proc so that nothing is reaped.
  def running?(pid)
    File.read("/proc/#{pid}/stat").rpartition(")").last.split.first != "Z"
  rescue SystemCallError
    false
  end
end
