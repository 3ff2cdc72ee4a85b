# Checks an installed kiqd-ruby-runner: starts it as kiqd does (its end of a socketpair as
# descriptor 3, KIQD_RUNNER_FD=3) with a one-class Sidekiq app, waits for `ready`, sends one job,
# and checks that the library the runner loaded is the one in LIB_DIR (the job's failure message
# is that path), then closes the socket and expects exit 0. Used by the `package` ctest
# (tests/package_test.cmake) and by scripts/test-deb, so that an installation that left the
# library out, or an executable that looks for it in the wrong place, fails. Needs Ruby and a
# Sidekiq the Ruby loads (Debian's ruby-sidekiq); no Redis (the job touches none).
#
#   ruby tests/runners/installed_runner_check.rb PREFIX/bin/kiqd-ruby-runner PREFIX/share/kiqd/ruby/lib
require "json"
require "socket"
require "tmpdir"

runner, lib_dir = ARGV
abort "usage: #{$PROGRAM_NAME} RUNNER LIB_DIR" unless runner && lib_dir
lib_dir = File.realpath(lib_dir)

def read_frame(sock, buf, what, log)
  deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 60
  until buf.bytesize >= 4 && buf.bytesize >= 4 + buf.unpack1("N")
    left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
    abort "installed_runner_check: no #{what} from #{ARGV[0]} within 60 s\n#{File.read(log)}" if left <= 0
    next unless IO.select([sock], nil, nil, left)
    chunk = sock.read_nonblock(65_536, exception: false)
    abort "installed_runner_check: #{ARGV[0]} closed its socket before #{what}\n#{File.read(log)}" if chunk.nil?
    buf << chunk unless chunk == :wait_readable
  end
  len = buf.unpack1("N")
  body = buf.byteslice(4, len)
  buf.replace(buf.byteslice(4 + len, buf.bytesize))
  body.split("\n", 2)
end

Dir.mktmpdir("kiqd-installed-runner-") do |dir|
  app = File.join(dir, "app.rb")
  File.write(app, <<~RUBY)
    require "sidekiq"
    Sidekiq.configure_server { |c| c.logger.level = Logger::WARN }
    class WhereJob
      include Sidekiq::Worker
      def perform
        raise File.dirname(File.dirname($LOADED_FEATURES.grep(%r{/kiqd/runner\\.rb\\z}).first.to_s))
      end
    end
  RUBY
  ours, theirs = Socket.pair(:UNIX, :STREAM)
  log = File.join(dir, "runner.log")
  pid = Process.spawn({"KIQD_RUNNER_FD" => "3", "KIQD_RUNNER_THREADS" => "1"}, runner, "--require", app,
                      3 => theirs, in: File::NULL, out: log, err: [:child, :out])
  theirs.close
  buf = "".b
  begin
    type, data = read_frame(ours, buf, "ready", log)
    abort "installed_runner_check: #{type.inspect} instead of ready\n#{File.read(log)}" unless type == "ready"
    ready = JSON.parse(data)
    body = "job 1\n" + JSON.generate({"class" => "WhereJob", "args" => [], "jid" => "installed-check", "queue" => "default"})
    ours.write([body.bytesize].pack("N"), body)
    type, data = read_frame(ours, buf, "the job's answer", log)
    loaded = JSON.parse(data)["message"]
    unless type == "fail 1" && loaded == lib_dir
      abort "installed_runner_check: the runner loaded its library from #{loaded.inspect}, not #{lib_dir} " \
            "(#{type})\n#{File.read(log)}"
    end
    ours.close_write
    _, status = Process.wait2(pid)
    pid = nil
    abort "installed_runner_check: exit #{status.inspect} at end of file\n#{File.read(log)}" unless status.exitstatus == 0
    puts "installed runner OK: #{ready["runner"]}, library #{loaded}"
  ensure
    if pid
      Process.kill("KILL", pid)
      Process.wait(pid)
    end
  end
end
