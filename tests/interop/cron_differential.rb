# The differential test of schedules: thousands of generated lines — cron lines of every form
# fugit reads (5/6 fields, ranges, steps, lists, names, L, #, &, `~`, `%`, zones) and fugit's
# natural language ("every day at 5pm", "from mon to fri at 9:30", …), valid and not — read by
# the real fugit 1.14.0 (the sidekiq73 world's, the one sidekiq-cron 2.4.0 runs on) as
# sidekiq-cron reads them (Fugit.parse_cronish) and by kiqd
# (kiqd_cron_times). Both must accept the same lines with the same next, following and previous
# times, and the same cron line for a natural-language one, from instants around daylight-saving
# changes in Europe/Berlin, America/New_York, America/Santiago and Australia/Sydney, with the
# machine's zone (TZ) set to each (a quarter of the lines each). `~` draws: fugit is handed the draws kiqd makes (a
# hash of the line), so the test checks what fugit does with them.
#
#   KIQD_CRON_TIMES=build/tests/kiqd_cron_times ruby tests/interop/cron_differential.rb
#
# Fails, naming the world and `bash scripts/install-gems sidekiq73`, when that world is missing.
require "minitest/autorun"
require_relative "../support/minitest_interrupt"
require "open3"
require_relative "worlds"

# "2026-03-08 06:30:00 UTC" as a UTC Time, without loading the time library.
class Time
  def self.parse_utc(s)
    d, t, = s.split(" ")
    y, mo, da = d.split("-").map(&:to_i)
    h, mi, se = t.split(":").map(&:to_i)
    Time.utc(y, mo, da, h, mi, se)
  end
end


class CronDifferentialTest < Minitest::Test
  WORLD = "sidekiq73"
  FUGIT_VERSION = "1.14.0"
  ZONES = %w[Europe/Berlin America/New_York America/Santiago Australia/Sydney].freeze
  # 2026's clock changes in those zones, and ordinary instants.
  FROMS = [
    "2026-03-08 06:30:00 UTC", "2026-03-29 00:59:30 UTC", "2026-10-25 00:30:00 UTC",
    "2026-11-01 05:45:00 UTC", "2026-04-05 02:10:00 UTC", "2026-09-06 03:50:00 UTC",
    "2026-04-04 15:30:00 UTC", "2026-10-03 16:00:00 UTC", "2026-02-28 23:59:59 UTC",
    "2026-12-31 23:00:00 UTC", "2026-06-15 12:34:56 UTC", "2028-02-28 22:00:00 UTC"
  ].map { |t| Time.parse_utc(t) }.freeze

  def setup
    assert_equal FUGIT_VERSION, KiqdInterop::Worlds.gem_version(WORLD, "fugit"), "fugit in #{WORLD}"
    @tool = ENV["KIQD_CRON_TIMES"]
    skip "KIQD_CRON_TIMES is not set (build/tests/kiqd_cron_times)" unless @tool && File.executable?(@tool)
  end

  # ---- generated lines

  def pick(r, a) = a[r.rand(a.size)]

  def cron_field(r, lo, hi, names = nil)
    n = -> { names && r.rand(4).zero? ? pick(r, names) : (lo + r.rand(hi - lo + 1)).to_s }
    case r.rand(12)
    when 0, 1 then "*"
    when 2 then n.call
    when 3 then "#{n.call}-#{n.call}"
    when 4 then "*/#{1 + r.rand(hi < 12 ? 6 : 20)}"
    when 5 then "#{n.call}/#{1 + r.rand(15)}"
    when 6 then "#{n.call},#{n.call},#{n.call}"
    when 7 then "#{n.call}-#{n.call}/#{1 + r.rand(7)}"
    when 8 then pick(r, ["~", "#{n.call}~", "~#{n.call}", "#{n.call}~#{n.call}"])
    when 9 then "#{n.call}~#{n.call}/#{1 + r.rand(9)}"
    when 10 then "/#{1 + r.rand(20)}"
    else pick(r, ["#{n.call},,#{n.call}", "#{hi + 1}", "#{n.call}-", "x", "#{n.call}~~"])
    end
  end

  DOW = %w[sun mon tue wed thu fri sat SUN Mon].freeze
  MON = %w[jan feb mar apr may jun jul aug sep oct nov dec].freeze

  def dow_field(r)
    case r.rand(8)
    when 0 then "#{pick(r, DOW)}#{pick(r, %w[#1 #2 #3 #5 #-1 #L])}"
    when 1 then "#{pick(r, DOW)}%#{pick(r, %w[2 3 4 0])}#{pick(r, ["", "+1", "+2"])}"
    when 2 then "#{pick(r, DOW)},#{pick(r, DOW)}%2"
    else cron_field(r, 0, 7, DOW)
    end
  end

  def cron_line(r)
    dom = r.rand(6).zero? ? pick(r, %w[L -1 -3 last 1-L 29 30 31]) : cron_field(r, 1, 31)
    dom += "&" if r.rand(15).zero?
    fields = [cron_field(r, 0, 59), cron_field(r, 0, 23), dom, cron_field(r, 1, 12, MON), dow_field(r)]
    fields.unshift(cron_field(r, 0, 59)) if r.rand(4).zero?
    fields << pick(r, [*ZONES, "UTC", "+05:30", "-03:00", "Mars/Olympus"]) if r.rand(2).zero?
    line = fields.join(" ")
    r.rand(30).zero? ? pick(r, ["@hourly", "@daily", "@weekly Europe/Berlin", "@monthly", "@noon", "@reboot"]) : line
  end

  TIMES = ["5pm", "noon", "midnight", "12 midnight", "9:30", "17:45", "8am", "12am", "12pm",
           "five", "five pm", "twelve o'clock", "Noon", "seven thirty", "twenty-one", "24:00",
           "10:00 and 14:00", "9, 12 and 17", "minute 5 and 35", "11:15 PM", "6:30am"].freeze
  WEEKDAY_WORDS = ["monday", "Tuesday", "fri", "mon and thu", "monday, wednesday or friday",
                   "mon-fri", "friday to sunday", "weekday", "sat"].freeze

  def nat_line(r)
    zone = r.rand(3).zero? ? " #{pick(r, ["in Europe/Berlin", "America/New_York", "UTC", "in +09:00", "Z"])}" : ""
    t = -> { pick(r, TIMES) }
    case r.rand(14)
    when 0 then "every #{pick(r, ["", "1 ", "2 ", "5 ", "15 ", "17 ", "30 ", "90 "])}#{pick(r, %w[minutes minute min hours hour seconds second days day months month h m s d M mins])}"
    when 1 then "every day at #{t.call}#{zone}"
    when 2 then "every #{pick(r, WEEKDAY_WORDS)} at #{t.call}#{zone}"
    when 3 then "every #{pick(r, WEEKDAY_WORDS)}#{zone}"
    when 4 then "at #{t.call}#{zone}"
    when 5 then "every #{pick(r, ["1st", "2nd", "15th", "last", "first", "twenty-first", "31st"])} of the month at #{t.call}"
    when 6 then "on the #{pick(r, ["1st", "15th", "last", "1st and 15th"])} at #{t.call}"
    when 7 then "from #{pick(r, ["mon to fri", "monday to friday", "the 1st to the 10th", "8:00 to 17:00", "8:30 to 17:00"])} at #{t.call}"
    when 8 then "every #{pick(r, ["week", "year", "1 week", "month", "weekday"])}#{zone}"
    when 9 then "every 5 minutes at #{t.call}"
    when 10 then "every hour on the minute #{r.rand(60)}"
    when 11 then "every #{pick(r, WEEKDAY_WORDS)} at #{t.call} and #{t.call}"
    when 12 then "every day on days #{pick(r, ["1", "1 and 15", "2,5"])} at #{t.call}"
    else pick(r, ["every blue moon", "every day at", "every 5 minutes please", "every\tday at noon",
                  "  every day at 5pm  ", "EVERY DAY AT 5PM", "every day at 5pm on the 1st"])
    end
  end

  def lines
    r = Random.new(Integer(ENV.fetch("CRON_DIFF_SEED", "20260401")))
    crons = Array.new(Integer(ENV.fetch("CRON_DIFF_CRONS", "1400"))) { cron_line(r) }
    nats = Array.new(Integer(ENV.fetch("CRON_DIFF_NATS", "700"))) { nat_line(r) }
    (crons + nats).uniq
  end

  # ---- fugit's side: a child Ruby in the world, TZ set for the whole run

  FUGIT = <<~RUBY
    require "fugit"
    class Draws # fugit's `random:` option, handed kiqd's draws
      def initialize(line) = (@line = line; @k = 0)
      def fnv(s) = s.bytes.inject(14695981039346656037) { |h, b| ((h ^ b) * 1099511628211) % 2**64 }
      def rand(n) = (v = fnv("\#{@line}#\#{@k}") % n; @k += 1; v)
    end
    STDIN.each_line do |l|
      from, line = l.chomp.split("\\t", 2)
      from = Time.at(Integer(from)).utc # as the gem passes it
      begin
        c = Fugit.parse_cronish(line, random: Draws.new(line))
        if c.nil?
          puts "refused"
        else
          n = c.next_time(from).to_i
          a = c.next_time(Time.at(n).utc).to_i
          pr = c.previous_time(from).to_i
          puts "ok \#{n} \#{a} \#{pr} \#{c.original == line ? "" : c.original}"
        end
      rescue StandardError, ZeroDivisionError => e
        puts "refused"
      end
    end
  RUBY

  def run_both(tz, input)
    env = { "TZ" => tz }
    fugit, err, st = Open3.capture3(env, *KiqdInterop::Worlds.ruby(WORLD, "-e", FUGIT), stdin_data: input)
    assert st.success?, "fugit's side failed: #{err}"
    kiqd, err, st = Open3.capture3(env, @tool, stdin_data: input)
    assert st.success?, "kiqd_cron_times failed: #{err}"
    [fugit.lines.map(&:chomp), kiqd.lines.map(&:chomp)]
  end

  def test_kiqd_reads_every_line_as_fugit_does
    all = lines
    # Each line once, in one of the zones, from one of the instants; the zones run side by side
    # (fugit takes most of the time: its natural-language parser is slow).
    runs = ZONES.each_with_index.map do |tz, zi|
      pairs = all.each_with_index.select { |_, i| i % ZONES.size == zi }
                 .map { |l, i| [FROMS[(i / ZONES.size) % FROMS.size], l] }
      input = pairs.map { |from, l| "#{from.to_i}\t#{l}\n" }.join
      [tz, pairs, Thread.new { run_both(tz, input) }]
    end
    checked = Hash.new(0)
    mismatches = []
    runs.each do |tz, pairs, thread|
      fugit, kiqd = thread.value
      assert_equal pairs.size, fugit.size
      assert_equal pairs.size, kiqd.size
      pairs.each_with_index do |(from, l), i|
        f = fugit[i].split(" ", 5)
        k = kiqd[i].split(" ", 5)
        checked[f[0]] += 1
        same = f[0] == k[0] && (f[0] == "refused" || (f[1, 3] == k[1, 3] && (f[4].to_s.empty? || f[4] == k[4].to_s)))
        mismatches << "TZ=#{tz} from #{from.utc} #{l.inspect}: fugit #{fugit[i].inspect}, kiqd #{kiqd[i].inspect}" unless same
      end
    end
    puts "\ncron differential: #{all.size} lines, #{checked["ok"]} accepted and #{checked["refused"]} refused by both"
    assert checked["ok"] > all.size / 2, "too few accepted lines to mean anything: #{checked.inspect}"
    assert checked["refused"] > all.size / 10, "too few refused lines: #{checked.inspect}"
    assert mismatches.empty?, "#{mismatches.size} differences, the first ones:\n#{mismatches.first(25).join("\n")}"
  end
end

