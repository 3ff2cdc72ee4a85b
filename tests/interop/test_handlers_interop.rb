# Handlers: jobs pushed by the real Ruby Sidekiq 6.4.1 client run as external commands
# (`handlers: … exec:`) and through the example plugin (`plugins:`); their failures and timeouts
# are Sidekiq retries that Sidekiq::RetrySet reads, and a retried entry runs again.
require "support"

class HandlersInteropTest < Minitest::Test
  include KiqdInterop::Helpers

  EXAMPLE_PLUGIN = File.expand_path(ENV["KIQD_EXAMPLE_PLUGIN"] || "build/examples/libimage_jobs.so",
                                    KiqdInterop::ROOT)

  def script(name, body)
    path = File.join(tmpdir, name)
    File.write(path, "#!/bin/sh\n#{body}\n")
    File.chmod(0o755, path)
    path
  end

  # The payload reaches the command's stdin byte for byte (shell metacharacters included, and
  # nothing is executed); a failure is a RetrySet entry; RetrySet#retry runs it again.
  def test_exec_handler_runs_ruby_pushed_jobs_fails_retries_and_times_out
    pwned = File.join(tmpdir, "pwned")
    capture = script("capture.sh", "cat > \"#{tmpdir}/$KIQD_JID.stdin\"\n" \
                                   "if [ -z \"$KIQD_RETRY_COUNT\" ] && grep -q fail-first \"#{tmpdir}/$KIQD_JID.stdin\"; then\n" \
                                   "  echo 'first attempt fails' >&2; exit 4\nfi\n" \
                                   "echo \"$KIQD_RETRY_COUNT\" > \"#{tmpdir}/$KIQD_JID.done\"")
    evil = ["$(touch #{pwned})", "`touch #{pwned}`", "; touch #{pwned} &", "| tee #{pwned}"]
    ok = Sidekiq::Client.push("class" => "Interop::Exec", "args" => evil)
    raw = redis.lindex("queue:default", 0)
    flaky = Sidekiq::Client.push("class" => "Interop::Exec", "args" => ["fail-first"], "retry" => 2)
    slow = Sidekiq::Client.push("class" => "Interop::Slow", "args" => [])
    start_kiqd({ "handlers" => {
                 "Interop::Exec" => { "exec" => [capture] },
                 "Interop::Slow" => { "exec" => ["/bin/sleep", "30"], "timeout" => 0.5 },
               } })
    wait_until(20, "the capture of #{ok}") { File.exist?(File.join(tmpdir, "#{ok}.done")) }
    assert_equal raw, File.binread(File.join(tmpdir, "#{ok}.stdin"))
    assert_equal evil, JSON.parse(File.read(File.join(tmpdir, "#{ok}.stdin")))["args"]
    refute File.exist?(pwned), "a shell metacharacter in args executed something"

    entries = wait_until(20, "two retry entries") do
      set = Sidekiq::RetrySet.new
      set.to_a if set.size == 2
    end
    by_jid = entries.to_h { |e| [e.jid, e] }
    assert_equal "Kiqd::ExecError", by_jid[flaky]["error_class"]
    assert_match(/capture\.sh exited with status 4; stderr: first attempt fails/,
                 by_jid[flaky]["error_message"])
    assert_equal 0, by_jid[flaky]["retry_count"]
    assert_equal "Kiqd::Timeout", by_jid[slow]["error_class"]
    assert_match(%r{/bin/sleep did not finish within 0\.5s}, by_jid[slow]["error_message"])

    by_jid[flaky].retry # Sidekiq's own API moves it back to its queue
    wait_until(20, "the retried job") { File.exist?(File.join(tmpdir, "#{flaky}.done")) }
    # SortedEntry#retry decrements retry_count before pushing (a manual retry does not count).
    assert_equal "-1\n", File.read(File.join(tmpdir, "#{flaky}.done"))
  end

  # The example plugin runs Ruby-pushed jobs; a plugin handler that throws is a normal retry.
  def test_example_plugin_runs_ruby_pushed_jobs_and_throwing_handlers_retry
    skip "#{EXAMPLE_PLUGIN} is not built" unless File.exist?(EXAMPLE_PLUGIN)
    Sidekiq::Client.push("class" => "Example::Thumbnail", "args" => ["/img/r.png", 32])
    boom = Sidekiq::Client.push("class" => "Example::Explode", "args" => [])
    kiqd = start_kiqd({ "plugins" => [EXAMPLE_PLUGIN] })
    wait_until(20, "the thumbnail") { redis.lrange("example:thumbnails", 0, -1) == ["/img/r.png@32"] }
    entry = wait_until(20, "the retry entry") { Sidekiq::RetrySet.new.find_job(boom) }
    assert_equal "std::runtime_error", entry["error_class"]
    assert_equal "the plugin blew up", entry["error_message"]
    assert kiqd.alive?, "a throwing plugin handler must not crash kiqd"
  end
end
