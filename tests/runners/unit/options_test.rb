# The command line and KIQD_RUNNER_THREADS (runners/ruby/lib/kiqd/runner/options.rb), read in
# this process as the runner reads them.
require_relative "support"

class OptionsTest < Minitest::Test
  def parse(*argv) = KiqdRubyRunner.parse_options(argv)

  def test_requires_in_order_and_the_other_options
    assert_equal({require: []}, parse)
    assert_equal({require: ["./a.rb", "/srv/app"]}, parse("--require", "./a.rb", "-r", "/srv/app"))
    assert_equal({require: ["x"], no_preload: true, environment: "production"},
                 parse("-r", "x", "--no-preload", "-e", "production"))
    assert_equal "staging", parse("--environment", "staging")[:environment]
  end

  def test_what_is_not_an_option_stays_in_argv
    argv = ["-r", "x", "extra"]
    KiqdRubyRunner.parse_options(argv)
    assert_equal ["extra"], argv
  end

  def test_an_unknown_option_or_a_missing_argument_raises
    assert_raises(OptionParser::InvalidOption) { parse("--preload") }
    assert_raises(OptionParser::MissingArgument) { parse("--require") }
  end

  def test_version_prints_and_exits_0
    out, = capture_io do
      error = assert_raises(SystemExit) { parse("--version") }
      assert_equal 0, error.status
    end
    assert_equal "kiqd-ruby-runner #{KiqdRubyRunner::VERSION}\n", out
  end

  def with_threads(value)
    saved = ENV.fetch("KIQD_RUNNER_THREADS", nil)
    value.nil? ? ENV.delete("KIQD_RUNNER_THREADS") : ENV["KIQD_RUNNER_THREADS"] = value
    yield
  ensure
    ENV["KIQD_RUNNER_THREADS"] = saved
  end

  def test_threads_from_the_environment
    with_threads(nil) { assert_equal 1, KiqdRubyRunner.threads_from_env }
    {"1" => 1, "5" => 5, "1024" => 1024, "08" => 8}.each do |text, n|
      with_threads(text) { assert_equal n, KiqdRubyRunner.threads_from_env, text }
    end
  end

  def test_threads_outside_1_to_1024_or_not_a_number_exit_78
    ["0", "1025", "-1", "abc", "5x", "", "0x10", "1.5"].each do |text|
      _, err = capture_io do
        error = with_threads(text) { assert_raises(SystemExit) { KiqdRubyRunner.threads_from_env } }
        assert_equal 78, error.status, text
      end
      assert_equal "kiqd-ruby-runner: KIQD_RUNNER_THREADS must be a whole number from 1 to 1024, not #{text.inspect}\n", err
    end
  end
end
