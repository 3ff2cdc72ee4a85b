# The test worlds as the interop files use them: a Ruby and a bundle of gems pinned by
# tests/gemfiles/WORLD.gemfile (+ .lock), installed by scripts/install-gems and entered through
# scripts/world (docs/testing.md). The suites' own Ruby process is Debian's Ruby with Debian's
# Sidekiq 6.4.1; everything that needs another gem runs as a child started through
# `scripts/world WORLD ...`, built here and nowhere else:
#
#   KiqdInterop::Worlds.ruby("sidekiq73", script, *args)       # [scripts/world, sidekiq73, ruby, ...]
#   KiqdInterop::Worlds.sidekiq("sidekiq81", "-r", jobfile)    # the world's bin/sidekiq
#   KiqdInterop::Worlds.sidekiq("sidekiq81", "-c", "1", bin: "sidekiqmon")
#   KiqdInterop::Worlds.gem_version("sidekiq64", "sidekiq-cron") # "1.12.0"
#
# scripts/world execs the command, so a child's PID is the world's Ruby itself: children are
# still stopped by their PID. A world that is not installed fails the test that needs it, naming
# the world and the command that installs it; nothing skips for a missing gem.
#
# KIQD_INTEROP_WORLDS (comma-separated, e.g. sidekiq81) narrows the files that run once per world
# (Worlds.per_world) to those worlds; run_all.rb sets it for the sidekiq7 and sidekiq8 groups.
require "json"
require "open3"
require "minitest"

module KiqdInterop
  module Worlds
    SCRIPT = File.join(File.expand_path("../..", __dir__), "scripts", "world")
    # The Sidekiq each world pins (tests/gemfiles/WORLD.gemfile.lock).
    SIDEKIQ = { "sidekiq64" => "6.4.1", "sidekiq73" => "7.3.10", "sidekiq81" => "8.1.7" }.freeze
    # The worlds of Sidekiq 7 and later, where the files of the sidekiq7/sidekiq8 groups run.
    MODERN = %w[sidekiq73 sidekiq81].freeze

    # Run inside the world by the check below: the Ruby, every gem of the bundle with its version,
    # and the executables the tests start.
    PROBE = <<~'RUBY'
      require "json"
      bins = %w[sidekiq sidekiqmon].to_h { |b| [b, (Gem.bin_path("sidekiq", b) rescue nil)] }
      puts JSON.generate("ruby" => RUBY_VERSION, "ruby_path" => RbConfig.ruby,
                         "gems" => Gem.loaded_specs.transform_values { |s| s.version.to_s },
                         "bin" => bins)
    RUBY

    @info = {}
    @lock = Mutex.new

    class << self
      # What the world holds ({"ruby", "ruby_path", "gems" => {name => version}, "bin"}), checked
      # once per run; fails the calling test (Minitest::Assertion) when the world is not
      # installed or does not pin the Sidekiq this suite expects.
      def require!(world)
        raise ArgumentError, "no world named #{world.inspect} (#{SIDEKIQ.keys.join(", ")})" unless
          SIDEKIQ.key?(world)
        result = @lock.synchronize { @info[world] ||= probe(world) }
        raise Minitest::Assertion, result if result.is_a?(String)
        result
      end

      # `cmd` run inside the world (scripts/world WORLD cmd...).
      def command(world, *cmd)
        require!(world)
        [SCRIPT, world, *cmd]
      end

      # The world's Ruby with `args` (bundler/setup loaded: the world's gems and no other).
      def ruby(world, *args)
        command(world, "ruby", *args)
      end

      # One of Sidekiq's executables of the world (bin/sidekiq by default) with `args`.
      def sidekiq(world, *args, bin: "sidekiq")
        path = require!(world)["bin"][bin] or
          raise Minitest::Assertion, "the #{world} world has no #{bin} executable"
        ruby(world, path, *args)
      end

      def gem_version(world, name)
        require!(world)["gems"][name]
      end

      def ruby_version(world)
        require!(world)["ruby"]
      end

      # Sidekiq's major version in the world (6, 7 or 8).
      def major(world)
        SIDEKIQ.fetch(world).to_i
      end

      # The worlds among `worlds` this run covers (KIQD_INTEROP_WORLDS, or all of them).
      def selected(worlds = MODERN)
        only = ENV["KIQD_INTEROP_WORLDS"].to_s.split(",").map(&:strip).reject(&:empty?)
        only.empty? ? worlds : worlds & only
      end

      # Makes `base` (a Minitest::Test subclass whose tests read `world`) run once per selected
      # world: `base` itself runs nothing, and a subclass per world (Base::Sidekiq73, ...) runs
      # every test of `base` with `world` set.
      def per_world(base, worlds = MODERN)
        base.define_singleton_method(:world) { nil }
        # Prepended, so that a runnable_methods of base's own (dropping a test in some worlds)
        # still applies to each world's subclass.
        base.singleton_class.prepend(Module.new { def runnable_methods = world ? super : [] })
        base.class_eval { define_method(:world) { self.class.world } }
        selected(worlds).each do |w|
          klass = Class.new(base) { define_singleton_method(:world) { w } }
          base.const_set(w.capitalize, klass)
        end
      end

      private

      def probe(world)
        out, status = Open3.capture2e(SCRIPT, world, "ruby", "-e", PROBE)
        unless status.success?
          return "the #{world} world is not installed (#{status}): run " \
                 "`bash scripts/install-gems #{world}`\n#{out.lines.last(15).join}"
        end
        info = JSON.parse(out.lines.last)
        got = info["gems"]["sidekiq"]
        return "the #{world} world pins Sidekiq #{got.inspect}, not #{SIDEKIQ[world]}: run " \
               "`bash scripts/install-gems #{world}` (tests/gemfiles/#{world}.gemfile.lock)" unless
          got == SIDEKIQ[world]
        info
      rescue JSON::ParserError, SystemCallError => e
        "the #{world} world did not answer (#{e.class}: #{e.message}): run " \
        "`bash scripts/install-gems #{world}`\n#{out}"
      end
    end
  end
end
