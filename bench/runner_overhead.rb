# The per-job overhead of a runner alone, without kiqd or Redis: this driver starts the runner on
# a socketpair (descriptor 3, as kiqd does) with a no-op Sidekiq job class, keeps THREADS job
# frames outstanding (a new one as each answer arrives), and reports jobs/s and the runner's CPU
# time per job (the sum of its threads' /proc/<pid>/task/*/schedstat over the measured jobs;
# boot and a warm-up are excluded).
#
#   ruby bench/runner_overhead.rb                        # 1 thread, Debian's Sidekiq
#   ruby bench/runner_overhead.rb --threads 5 --jobs 50000
#   scripts/world sidekiq73 ruby bench/runner_overhead.rb      # Sidekiq 7.3 (a test world;
#   scripts/world sidekiq81 ruby bench/runner_overhead.rb      # 8.1 on Ruby 3.3): the runner
#                                                              # inherits the world
#   ruby bench/runner_overhead.rb --untagged --runner OLD_RUNNER   # a runner without tags
#   ruby bench/runner_overhead.rb --threads 5 --seats     # a socket per seat, as kiqd gives them
#
# --untagged sends plain `job` frames (one at a time, as to a runner that did not announce
# threads). --seats gives the runner a socket per thread (the `seats` frame) and keeps one job
# outstanding on each; without it, every job goes over the one protocol socket, tagged.
require "json"
require "optparse"
require "socket"
require "tmpdir"

opts = {threads: 1, jobs: 20_000, warmup: 2_000, runner: File.expand_path("../runners/ruby/kiqd-ruby-runner", __dir__)}
OptionParser.new do |o|
  o.on("--threads N", Integer) { |v| opts[:threads] = v }
  o.on("--jobs N", Integer) { |v| opts[:jobs] = v }
  o.on("--warmup N", Integer) { |v| opts[:warmup] = v }
  o.on("--runner PATH") { |v| opts[:runner] = v }
  o.on("--untagged") { opts[:untagged] = true }
  o.on("--seats") { opts[:seats] = true }
end.parse!
opts[:threads] = 1 if opts[:untagged]

dir = Dir.mktmpdir("kiqd-runner-overhead-")
app = File.join(dir, "app.rb")
File.write(app, <<~RUBY)
  require "sidekiq"
  Sidekiq.configure_server { |c| c.logger.level = Logger::WARN }
  class NoopJob
    include Sidekiq::Worker
    def perform(*); end
  end
RUBY

ours, theirs = Socket.pair(:UNIX, :STREAM)
require "io/nonblock"
theirs.nonblock = false
ours.nonblock = false
env = {"KIQD_RUNNER_FD" => "3", "KIQD_RUNNER_THREADS" => opts[:threads].to_s, "REDIS_URL" => "redis://127.0.0.1:1/0"}
pid = Process.spawn(env, RbConfig.ruby, opts[:runner], "--require", app, 3 => theirs, in: File::NULL,
                    out: File.join(dir, "runner.log"), err: [:child, :out])
theirs.close
buf = "".b
read_frame = lambda do
  buf << ours.readpartial(65536) while buf.bytesize < 4 || buf.bytesize < 4 + buf.unpack1("N")
  len = buf.unpack1("N")
  body = buf.byteslice(4, len)
  buf = buf.byteslice(4 + len, buf.bytesize)
  body
end
frame = lambda do |type, data|
  body = "#{type}\n#{data}"
  [body.bytesize].pack("N") + body
end
ready = JSON.parse(read_frame.call.split("\n", 2)[1])
seats = []
if opts[:seats]
  abort "the runner did not ask for seats" unless ready["seats"]
  pairs = Array.new(opts[:threads]) { Socket.pair(:UNIX, :STREAM) }
  ours.sendmsg(frame.call("seats", JSON.generate("count" => pairs.size)), 0, nil,
               Socket::AncillaryData.unix_rights(*pairs.map(&:last)))
  pairs.each { |_, t| t.close }
  seats = pairs.map(&:first)
end
payload = JSON.generate({"class" => "NoopJob", "args" => [1, "two"], "jid" => "0123456789abcdef01234567", "queue" => "default",
                         "retry" => true, "created_at" => 1.0, "enqueued_at" => 1.0})
tag_free = (1..opts[:threads]).to_a
send_job = lambda do |out|
  if opts[:untagged]
    out << frame.call("job", payload)
  else
    out << frame.call("job #{tag_free.shift}", payload)
  end
end

cpu_ns = lambda do
  Dir["/proc/#{pid}/task/*/schedstat"].sum { |f| File.read(f).split[0].to_i rescue 0 }
end
switches = lambda do
  Dir["/proc/#{pid}/task/*/status"].sum do |f|
    File.read(f).scan(/^(?:non)?voluntary_ctxt_switches:\s+(\d+)/).flatten.sum(&:to_i)
  rescue
    0
  end
end

# One job outstanding per seat; a seat's answer is one frame of 4 + 5 bytes ("done\n{}").
run_seats = lambda do |count|
  job = frame.call("job", payload)
  sent = 0
  done = 0
  seats.each { |s| s.write(job) && sent += 1 if sent < count }
  while done < count
    IO.select(seats)[0].each do |s|
      body = s.readpartial(64)
      raise "unexpected answer #{body.inspect}" unless body == "\x00\x00\x00\x07done\n{}".b
      done += 1
      if sent < count
        s.write(job)
        sent += 1
      end
    end
  end
end

run = lambda do |count|
  next run_seats.call(count) if opts[:seats]
  sent = 0
  done = 0
  out = +""
  while sent < count && sent - done < opts[:threads]
    send_job.call(out)
    sent += 1
  end
  ours.write(out)
  while done < count
    body = read_frame.call
    type = body[0, body.index("\n")]
    raise "unexpected answer #{body[0, 200]}" unless type.start_with?("done")
    tag_free << type.split(" ", 2)[1].to_i unless opts[:untagged]
    done += 1
    next unless sent < count
    out = +""
    send_job.call(out)
    sent += 1
    ours.write(out)
  end
end

run.call(opts[:warmup])
cpu0 = cpu_ns.call
sw0 = switches.call
t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
run.call(opts[:jobs])
wall = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
cpu = cpu_ns.call - cpu0
sw = switches.call - sw0
ours.close
Process.wait(pid)
FileUtils.rm_rf(dir) if defined?(FileUtils)
puts format("%-40s threads=%d%s jobs=%d  %8.0f jobs/s  %6.1f us CPU/job  %4.1f context switches/job (runner)",
            ready["runner"], opts[:threads], opts[:untagged] ? " untagged" : (opts[:seats] ? " seats" : ""), opts[:jobs],
            opts[:jobs] / wall, cpu / 1000.0 / opts[:jobs], sw.to_f / opts[:jobs])
