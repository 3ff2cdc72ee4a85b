# Membership: a running kiqd is an ordinary member of a Sidekiq 6.4.1 cluster for
# Sidekiq::ProcessSet / Workers / Stats, remote quiet!/stop!, sidekiqmon and the Web UI, and it
# leaves no ghost behind when it is killed.
require "support"
require "net/http"
require "uri"
require "socket"

class MembershipInteropTest < Minitest::Test
  include KiqdInterop::Helpers

  HOSTNAME = Socket.gethostname

  def sleep_job(seconds = 60)
    Sidekiq::Client.push("class" => "Kiqd::Sleep", "args" => [seconds])
  end

  # 5. ProcessSet, Workers and Stats.
  def test_process_set_workers_and_stats_reflect_kiqd
    jid = sleep_job(60)
    t0 = Time.now.to_f
    kiqd = start_kiqd({ "concurrency" => 3, "queues" => [["critical", 2], ["default", 1]],
                        "tag" => "interop-tag", "labels" => ["blue", "canary"] })

    process = wait_until(12, "busy == 1 in ProcessSet") do
      p = process_for(kiqd)
      p if p && p["busy"] == 1
    end
    assert_equal kiqd.identity, process.identity
    assert_equal 3, process["concurrency"]
    assert_equal ["critical", "default"], process["queues"]
    assert_equal ["critical", "default"], process.queues
    assert_equal "interop-tag", process.tag
    assert_equal ["blue", "canary"], process.labels
    assert_equal HOSTNAME, process["hostname"]
    assert_equal kiqd.pid, process["pid"]
    assert_equal "false", process["quiet"]
    refute process.stopping?
    assert_kind_of Float, process["started_at"]
    assert_operator process["started_at"], :>=, t0 - 1, "started_at is epoch seconds"
    assert_operator process["started_at"], :<=, Time.now.to_f + 1
    assert_kind_of Float, process["beat"]
    assert_operator process["rss"].to_i, :>, 0
    assert_operator process["rtt_us"].to_i, :>=, 0
    assert_equal 1, Sidekiq::ProcessSet.new.size
    assert_equal 3, Sidekiq::ProcessSet.new.total_concurrency

    tid, work = wait_for_running(kiqd, jid)
    refute_empty tid.to_s
    assert_equal "default", work["queue"]
    assert_equal "Kiqd::Sleep", work["payload"]["class"]
    assert_equal jid, work["payload"]["jid"]
    assert_equal [60], work["payload"]["args"]
    assert_kind_of Integer, work["run_at"]
    assert_operator work["run_at"], :>=, t0.floor - 1, "run_at is epoch seconds"
    assert_operator work["run_at"], :<=, Time.now.to_i + 1
    assert_equal 1, Sidekiq::Workers.new.size
    assert_equal 1, Sidekiq::Workers.new.count

    # Stats: 5 successes and 2 failures (retry: false keeps them out of the retry set).
    5.times { |i| Sidekiq::Client.push("class" => "Kiqd::Noop", "args" => [i]) }
    2.times { |i| Sidekiq::Client.push("class" => "Kiqd::Fail", "args" => ["f#{i}"], "retry" => false) }
    wait_until(15, "Stats processed 7 / failed 2") do
      s = Sidekiq::Stats.new
      s.processed >= 7 && s.failed >= 2
    end
    wait_for_beats(kiqd, 1) # one more flush must not count anything twice
    stats = Sidekiq::Stats.new
    assert_equal 7, stats.processed
    assert_equal 2, stats.failed
    assert_equal 0, stats.retry_size
    assert_equal 0, stats.dead_size
    assert_equal 1, stats.processes_size
    assert_equal 1, stats.workers_size
    today = Sidekiq::Stats::History.new(1)
    assert_equal 7, today.processed.values.first
    assert_equal 2, today.failed.values.first
  end

  # 6. Remote quiet! and stop! through the Sidekiq API.
  def test_remote_quiet_and_stop
    kiqd = start_kiqd
    identity = kiqd.identity
    process = wait_until(10, "kiqd in ProcessSet") { process_for(kiqd) }
    refute process.stopping?

    # As in Sidekiq 6.4.1, a beat pops the signal after writing its own `quiet` field, so
    # "true" shows up one beat after the beat that consumed the signal: up to 2 periods.
    process.quiet!
    wait_until(14, "quiet == \"true\"") { process_for(kiqd)&.stopping? }
    assert_equal "true", redis.hget(identity, "quiet")
    assert_equal 0, redis.llen("#{identity}-signals"), "the signal must have been consumed"

    jid = Sidekiq::Client.push("class" => "Kiqd::Noop", "args" => [])
    wait_for_beats(kiqd, 2) # > 5 s, longer than the 2 s BRPOP timeout
    assert kiqd.alive?, "quiet must not stop the process"
    assert_equal [jid], Sidekiq::Queue.new("default").map(&:jid), "a quiet process must not fetch"
    assert_equal 0, Sidekiq::Stats.new.processed
    assert process_for(kiqd), "a quiet process keeps its heartbeat"

    process_for(kiqd).stop!
    assert_exits_cleanly(kiqd, 15, "kiqd did not exit after stop!")
    refute redis.sismember("processes", identity)
    assert_nil process_for(kiqd)
    assert_equal 0, Sidekiq::ProcessSet.new.size
    assert_equal [jid], Sidekiq::Queue.new("default").map(&:jid)
  end

  # 7. sidekiqmon prints the kiqd process.
  def test_sidekiqmon_lists_kiqd
    kiqd = start_kiqd({ "concurrency" => 4, "tag" => "mon-tag", "labels" => ["lbl"],
                        "queues" => ["default", "low"] })
    wait_until(10, "kiqd in ProcessSet") { process_for(kiqd) }
    mon = spawn_child("sidekiqmon", KiqdInterop.sidekiq_command("sidekiqmon"))
    status = mon.wait(30)
    assert status, "sidekiqmon did not finish"
    out = mon.log
    assert status.success?, out
    assert_includes out, "Sidekiq 6.4.1"
    assert_includes out, "---- Processes (1) ----"
    assert_includes out, "#{kiqd.identity} [mon-tag] [lbl]"
    assert_includes out, "#{HOSTNAME}:#{kiqd.pid}:"
    assert_match(/Threads: 4 \(0 busy\)/, out)
    assert_match(/Queues: default, low/, out)
    refute_match(/Couldn't get status/, out)
  end

  # 8. kill -9: the records kiqd leaves behind expire by TTL, so no ghost remains.
  def test_killed_process_expires_by_ttl
    jid = sleep_job(60)
    kiqd = start_kiqd
    identity = kiqd.identity
    wait_for_running(kiqd, jid)

    kiqd.signal("KILL")
    refute_nil kiqd.wait(10), "kiqd survived SIGKILL?"
    assert_equal "KILL", Signal.signame(kiqd.status.termsig)

    %W[#{identity} #{identity}:workers #{identity}:work].each do |key|
      ttl = redis.ttl(key)
      assert_operator ttl, :>, 0, "#{key} must exist with a TTL (got #{ttl})"
      assert_operator ttl, :<=, 60, "#{key} TTL"
    end
    assert redis.sismember("processes", identity), "nothing removed it yet"

    unless KiqdInterop::FAST
      # Each key expires 60 s after its own last write: :work may have been written after the
      # identity hash's last beat (the job's start), so it is awaited too, not checked at once.
      wait_until(70, "the identity hash and its :workers and :work to expire") do
        redis.exists(identity, "#{identity}:workers", "#{identity}:work").zero?
      end
      assert_nil process_for(kiqd), "ProcessSet must not list an expired process"
      refute redis.sismember("processes", identity), "ProcessSet#cleanup prunes the identity"
      assert_equal 0, Sidekiq::Workers.new.count
      assert_equal 0, Sidekiq::ProcessSet.new.size
    end
  end

  # 9. The Sidekiq 6.4.1 Web UI shows kiqd on /busy (HTML, and rendered by headless Chromium).
  def test_web_ui_busy_page
    # Also give the Retries and Dead pages something kiqd wrote: a failure with a compressed
    # backtrace and two unrunnable payloads.
    fail_jid = Sidekiq::Client.push("class" => "Kiqd::Fail", "args" => ["web <boom>"],
                                    "retry" => 2, "backtrace" => true)
    no_class_jid = SecureRandom.hex(12)
    redis.lpush("queue:default", JSON.generate("jid" => no_class_jid, "args" => [1]))
    redis.lpush("queue:default", "not json")
    jid = sleep_job(90)
    kiqd = start_kiqd({ "tag" => "web-tag", "labels" => ["ui"] })
    wait_for_running(kiqd, jid)
    wait_until(10, "the retry and dead entries") do
      Sidekiq::RetrySet.new.size == 1 && Sidekiq::DeadSet.new.size == 2
    end

    base = start_web_ui
    html = http_get(base + "/busy")
    assert_equal "200", html.code
    body = html.body
    assert_includes body, "#{HOSTNAME}:#{kiqd.pid}"
    assert_includes body, kiqd.identity
    assert_includes body, "Kiqd::Sleep"
    assert_includes body, jid
    assert_includes body, "web-tag"
    %w[/ /queues /retries /scheduled /morgue /queues/default /stats].each do |path|
      assert_equal "200", http_get(base + path).code, "GET #{path}"
    end
    check_retry_and_dead_pages(base, fail_jid, no_class_jid)

    browser_checks(base, kiqd, jid) if chromium_path

    # The Web UI's per-process "Quiet" button reaches kiqd through the signals list.
    post_quiet_via_ui(base, kiqd.identity)
    wait_until(14, "quiet after the Web UI button") { process_for(kiqd)&.stopping? }
    assert_match(/label-danger">quiet</, http_get(base + "/busy").body)

    unless chromium_path
      skip "chromium not installed: only the browser part (DOM dump, docs/web-ui-busy.png) was " \
           "not checked; install it with `apt-get install -y chromium`"
    end
  end

  private

  # Follows the links the UI itself renders on /retries and /morgue to each entry's page.
  def check_retry_and_dead_pages(base, fail_jid, no_class_jid)
    retries = http_get(base + "/retries").body
    link = retries[%r{/retries/([0-9.]+-#{fail_jid})"}, 1]
    refute_nil link, "no link to the retry entry on /retries"
    page = http_get(base + "/retries/" + link)
    assert_equal "200", page.code
    assert_includes page.body, "RuntimeError"
    assert_includes page.body, "web &lt;boom&gt;"
    assert_match(/kiqd:in .Kiqd::Fail/, page.body, "the decoded error_backtrace must be shown")

    morgue = http_get(base + "/morgue").body
    links = morgue.scan(%r{/morgue/([0-9.]+-\h{24})"}).flatten.uniq
    assert_equal 2, links.size, "two dead entries must be linked on /morgue"
    bodies = links.map do |l|
      res = http_get(base + "/morgue/" + l)
      assert_equal "200", res.code, "GET /morgue/#{l}"
      res.body
    end
    assert(bodies.any? { |b| b.include?(no_class_jid) && b.include?("Kiqd::InvalidJob") })
    assert(bodies.any? { |b| b.include?("JSON::ParserError") && b.include?("not json") })
  end

  def post_quiet_via_ui(base, identity)
    page = http_get(base + "/busy")
    cookie = page.get_fields("set-cookie").map { |c| c.split(";").first }.join("; ")
    token = page.body[/name=['"]authenticity_token['"] value=['"]([^'"]+)['"]/, 1]
    refute_nil token, "no CSRF token on /busy"
    uri = URI(base + "/busy")
    res = Net::HTTP.start(uri.host, uri.port) do |http|
      req = Net::HTTP::Post.new(uri.request_uri, "Cookie" => cookie)
      req.set_form_data("authenticity_token" => token, "identity" => identity, "quiet" => "1")
      http.request(req)
    end
    assert_equal "302", res.code, "POST /busy (quiet) was refused: #{res.code} #{res.body[0, 300]}"
  end

  def browser_checks(base, kiqd, jid)
    dom = chromium(base + "/busy", "--dump-dom")
    assert_includes dom, "#{HOSTNAME}:#{kiqd.pid}"
    assert_includes dom, kiqd.identity
    assert_includes dom, "Kiqd::Sleep"
    assert_includes dom, jid

    target = ENV["KIQD_INTEROP_SCREENSHOT"] || File.join(KiqdInterop::ROOT, "docs", "web-ui-busy.png")
    shot = File.join(tmpdir, "web-ui-busy.png")
    chromium(base + "/busy", "--screenshot=#{shot}")
    assert File.exist?(shot), "no screenshot written"
    png = File.binread(shot)
    assert_equal "\x89PNG".b, png[0, 4], "the screenshot is not a PNG"
    width, height = png[16, 8].unpack("NN")
    assert_equal [1400, 900], [width, height]
    unless target.empty? || target == "none"
      FileUtils.mkdir_p(File.dirname(target))
      FileUtils.cp(shot, target)
    end
  end
end
