# What sidekiq-throttled's admission check costs a runner job: this driver starts a private
# redis-server (127.0.0.1, a free port) and kiqd-ruby-runner on a socketpair (descriptor 3, as
# kiqd does) with two job classes, one plain and one with `sidekiq_throttle concurrency:` at a
# limit it never reaches, runs JOBS of each with THREADS frames outstanding, and reports per
# class jobs/s and the Redis round trips per job (counted with MONITOR). kiqd's own Redis work
# is the same for both classes, so the difference is what the throttled path adds.
#
#   scripts/world sidekiq73 ruby bench/throttled_cost.rb                # sidekiq-throttled 1.5.2
#   scripts/world sidekiq81 ruby bench/throttled_cost.rb --jobs 20000   # 2.1.0 on Sidekiq 8.1
require "json"
require "optparse"
require "socket"
require "tmpdir"

opts = {threads: 5, jobs: 10_000}
OptionParser.new do |o|
  o.on("--threads N", Integer) { |v| opts[:threads] = v }
  o.on("--jobs N", Integer) { |v| opts[:jobs] = v }
end.parse!

dir = Dir.mktmpdir("kiqd-throttled-cost-")
port = TCPServer.open("127.0.0.1", 0) { |s| s.addr[1] }
redis_pid = Process.spawn("redis-server", "--port", port.to_s, "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no", "--dir", dir, out: File::NULL, err: File::NULL)
at_exit do
  [$runner_pid, redis_pid].compact.each do |p|
    Process.kill("TERM", p)
    Process.wait(p)
  rescue Errno::ESRCH, Errno::ECHILD
    nil
  end
end
# Ready once it accepts a connection.
100.times do
  TCPSocket.new("127.0.0.1", port).close
  break
rescue Errno::ECONNREFUSED
  sleep 0.05
end

app = File.join(dir, "app.rb")
File.write(app, <<~RUBY)
  require "sidekiq"
  require "sidekiq/throttled"
  Sidekiq.configure_server { |c| c.logger.level = Logger::WARN }
  class PlainJob
    include Sidekiq::Job
    def perform(*); end
  end
  class ThrottledJob
    include Sidekiq::Job
    include Sidekiq::Throttled::Job
    sidekiq_throttle concurrency: {limit: 1_000_000}
    def perform(*); end
  end
RUBY

runner = File.expand_path("../runners/ruby/kiqd-ruby-runner", __dir__)
ours, theirs = Socket.pair(:UNIX, :STREAM)
env = {"KIQD_RUNNER_FD" => "3", "KIQD_RUNNER_THREADS" => opts[:threads].to_s,
       "REDIS_URL" => "redis://127.0.0.1:#{port}/0"}
$runner_pid = Process.spawn(env, RbConfig.ruby, runner, "--require", app, 3 => theirs, in: File::NULL,
                    out: File.join(dir, "runner.log"), err: [:child, :out])
theirs.close
buf = "".b
read_frame = lambda do
  buf << ours.readpartial(65_536) while buf.bytesize < 4 || buf.bytesize < 4 + buf.unpack1("N")
  len = buf.unpack1("N")
  body = buf.byteslice(4, len)
  buf = buf.byteslice(4 + len, buf.bytesize)
  body
end
send_frame = lambda do |type, data|
  body = "#{type}\n#{data}"
  ours.write([body.bytesize].pack("N") + body)
end
ready = read_frame.call
abort "no ready: #{ready}" unless ready.start_with?("ready")

run = lambda do |klass, count|
  sent = 0
  payload = ->(i) { JSON.generate("class" => klass, "args" => [i], "jid" => format("%024x", i), "queue" => "default", "retry" => true) }
  opts[:threads].times { send_frame.call("job #{sent += 1}", payload.call(sent)) }
  done = 0
  while done < count
    type = read_frame.call.split("\n", 2)[0]
    abort "#{klass}: #{type}" unless type.start_with?("done")
    done += 1
    send_frame.call("job #{sent += 1}", payload.call(sent)) if sent < count
  end
end

%w[PlainJob ThrottledJob].each do |klass|
  run.call(klass, 1_000) # warm-up: scripts loaded, classes resolved
  t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  run.call(klass, opts[:jobs])
  elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
  trips = monitored(port, 1_000) { run.call(klass, 1_000) }
  puts format("%-13s %8.0f jobs/s  %.2f Redis round trips per job", klass, opts[:jobs] / elapsed, trips)
end
