# The executable runners/ruby/kiqd-ruby-runner, started as a process: how it finds its library
# (beside its real path in the sources, through a symlink, at the installed place, or nowhere),
# what it says without kiqd, and that a protocol error ends it with exit 2 and a reason.
require_relative "support"
require "fileutils"
require "tmpdir"

class ExecutableTest < Minitest::Test
  include UnitHarness::Frames

  def setup = @dir = Dir.mktmpdir("kiqd-runner-unit-")
  def teardown = FileUtils.rm_rf(@dir)

  # [stdout and stderr, exit status] of the runner started with `args`.
  def run_runner(path, *args, env: {})
    out = IO.popen({"KIQD_RUNNER_FD" => nil}.merge(env), [RbConfig.ruby, path, *args], err: [:child, :out], &:read)
    [out, $?]
  end

  def test_in_the_sources_it_loads_lib_beside_its_real_path
    out, status = run_runner(UnitHarness::RUNNER, "--version")
    assert_equal ["kiqd-ruby-runner #{KiqdRubyRunner::VERSION}\n", 0], [out, status.exitstatus]
    link = File.join(@dir, "kiqd-ruby-runner")
    File.symlink(UnitHarness::RUNNER, link)
    out, status = run_runner(link, "--version")
    assert_equal ["kiqd-ruby-runner #{KiqdRubyRunner::VERSION}\n", 0], [out, status.exitstatus],
                 "a symlink on the PATH finds the library beside the file it points to"
  end

  # The layout `make install` and the .deb make (bin/ and share/kiqd/ruby/lib under one
  # prefix): the runner runs a job with the library there, not the one in the sources.
  def test_installed_it_loads_the_library_at_the_installed_place
    bin = File.join(@dir, "prefix/bin")
    lib = File.join(@dir, "prefix/share/kiqd/ruby/lib")
    FileUtils.mkdir_p([bin, File.dirname(lib)])
    FileUtils.cp(UnitHarness::RUNNER, bin)
    FileUtils.cp_r(File.join(UnitHarness::ROOT, "runners/ruby/lib"), lib)
    check = File.join(UnitHarness::ROOT, "tests/runners/installed_runner_check.rb")
    out = IO.popen([RbConfig.ruby, check, File.join(bin, "kiqd-ruby-runner"), lib], err: [:child, :out], &:read)
    assert $?.success?, out
    assert_match(/installed runner OK: .*library #{Regexp.escape(File.realpath(lib))}$/, out)
  end

  def test_without_its_library_it_says_where_it_looked
    FileUtils.cp(UnitHarness::RUNNER, @dir)
    out, status = run_runner(File.join(@dir, "kiqd-ruby-runner"), "--version")
    assert_equal 1, status.exitstatus
    real = File.realpath(@dir)
    assert_equal "kiqd-ruby-runner: its library (kiqd/runner.rb) is in none of #{real}/lib, " \
                 "#{File.expand_path("../share/kiqd/ruby/lib", real)}\n", out
  end

  def test_without_kiqd_it_exits_1
    out, status = run_runner(UnitHarness::RUNNER, "--require", UnitHarness::APP)
    assert_equal ["kiqd-ruby-runner: KIQD_RUNNER_FD is not set (kiqd starts this program)\n", 1], [out, status.exitstatus]
  end

  # Starts the runner on a socketpair with the unit test app, reads its `ready`, sends `bytes`
  # and returns [exit status, its output]: a protocol error must end it.
  def after_sending(bytes)
    ours, theirs = Socket.pair(:UNIX, :STREAM)
    log = File.join(@dir, "runner.log")
    pid = Process.spawn({"KIQD_RUNNER_FD" => "3", "KIQD_RUNNER_THREADS" => "2"}, RbConfig.ruby, UnitHarness::RUNNER,
                        "--require", UnitHarness::APP, 3 => theirs, in: File::NULL, out: log, err: [:child, :out])
    theirs.close
    buf = "".b
    assert_equal "ready", read_frame(ours, buf, 60).first, -> { File.read(log) }
    ours.write(bytes)
    assert_equal :eof, read_frame(ours, buf, 60), "no answer to a frame that breaks the protocol"
    _, status = Process.wait2(pid)
    pid = nil
    [status.exitstatus, File.read(log)]
  ensure
    Process.kill("KILL", pid) if pid
    Process.wait(pid) if pid
    ours&.close
  end

  def test_protocol_errors_end_the_process_with_exit_2
    assert_equal [2, "kiqd-ruby-runner: unknown frame \"bogus 1\"\n"], after_sending(frame("bogus 1", "{}"))
    assert_equal [2, "kiqd-ruby-runner: a 'written' frame for tag 9, which waits for nothing\n"],
                 after_sending(frame("written 9", "{}"))
    assert_equal [2, "kiqd-ruby-runner: RuntimeError: frame of #{KiqdRubyRunner::MAX_FRAME + 1} bytes\n"],
                 after_sending([KiqdRubyRunner::MAX_FRAME + 1].pack("N"))
    assert_equal [2, "kiqd-ruby-runner: RuntimeError: an empty frame (no type)\n"], after_sending([0].pack("N"))
  end
end
