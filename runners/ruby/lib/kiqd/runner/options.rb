# frozen_string_literal: true

# The command line and KIQD_RUNNER_THREADS, read once on the main thread before anything boots.

require "optparse"

module KiqdRubyRunner
  MAX_THREADS = 1024

  module_function

  def parse_options(argv)
    opts = {require: []}
    OptionParser.new do |o|
      o.banner = "usage: kiqd-ruby-runner --require FILE_OR_RAILS_ROOT [--require ...]"
      o.on("-r", "--require PATH", "a Ruby file, or a Rails root (its config/environment.rb)") do |p|
        opts[:require] << p
      end
      o.on("--no-preload", "boot in every process kiqd starts (do not act as a forking master)") do
        opts[:no_preload] = true
      end
      o.on("-e", "--environment ENV", "RAILS_ENV/RACK_ENV for the application") { |e| opts[:environment] = e }
      o.on("-v", "--version") do
        puts "kiqd-ruby-runner #{VERSION}"
        exit 0
      end
    end.parse!(argv)
    opts
  end

  # KIQD_RUNNER_THREADS: how many jobs kiqd runs at once in one process (the pool's `threads`).
  def threads_from_env
    text = ENV.fetch("KIQD_RUNNER_THREADS", "1")
    n = Integer(text, 10, exception: false)
    return n if n && n >= 1 && n <= MAX_THREADS
    $stderr.puts "kiqd-ruby-runner: KIQD_RUNNER_THREADS must be a whole number from 1 to #{MAX_THREADS}, not #{text.inspect}"
    exit 78
  end
end
