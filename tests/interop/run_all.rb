# Runs the interop files of one group (ctest runs each group as its own test, side by side):
#   debian    the files that need only Debian's Sidekiq 6.4.1 (the suite's own Ruby)
#   sidekiq7  the Sidekiq 7 files (API, Web UI, sidekiqmon, compat auto, capsules) on Sidekiq
#             7.3.10: the sidekiq73 world (tests/gemfiles/sidekiq73.gemfile, scripts/world)
#   sidekiq8  the same files on Sidekiq 8.1.7, Ruby 3.3: the sidekiq81 world
#   gems      the files that load the client gems from the worlds: sidekiq-unique-jobs (7.1.33 in
#             sidekiq64, 8.1.0 in sidekiq73 and sidekiq81), sidekiq-cron (1.12.0 in sidekiq64,
#             2.4.0 in sidekiq73 and sidekiq81), sidekiq-fair_tenant 0.1.0 (sidekiq64, sidekiq73)
#   fetch_gems  the gems that act at fetch time, each under the real Sidekiq server and under
#             kiqd: sidekiq-throttled and sidekiq-limit_fetch (sidekiq73, sidekiq81),
#             gitlab-sidekiq-fetcher (sidekiq64)
#   rails     the Rails app on a private PostgreSQL cluster (skips without PostgreSQL)
#   differential  the runner differential suite: one app under the real Sidekiq server and under
#             kiqd with kiqd-ruby-runner, on 6.4, 7.3 and 8.1 (the sidekiq64/73/81 worlds)
#   (none)    every file, the Sidekiq 7 files in both worlds
# The worlds are installed by `bash scripts/install-gems`; a test whose world is missing fails,
# naming the world and that command.
require "minitest/autorun"
require_relative "../support/minitest_interrupt"
SIDEKIQ7_FILES = %w[test_sidekiq7_interop.rb test_sidekiq7_suite_interop.rb test_capsules7_interop.rb].freeze
GROUPS = {
  "sidekiq7" => SIDEKIQ7_FILES,
  "sidekiq8" => SIDEKIQ7_FILES,
  "gems" => %w[test_cron_interop.rb test_cron2_interop.rb test_fair_tenant_gem_interop.rb test_unique_gems_interop.rb],
  "fetch_gems" => %w[test_throttled_gem_interop.rb test_limit_fetch_gem_interop.rb test_gitlab_fetcher_gem_interop.rb],
  "rails" => %w[test_rails_pg_interop.rb],
  "differential" => %w[test_runner_differential_interop.rb test_runner_declarations_interop.rb]
}.freeze
# The worlds the Sidekiq 7 files run in (KiqdInterop::Worlds.per_world).
GROUP_WORLDS = { "sidekiq7" => "sidekiq73", "sidekiq8" => "sidekiq81" }.freeze
group = ARGV.shift
files = Dir[File.join(__dir__, "test_*.rb")].sort
files = case group
        when nil then files
        when "debian" then files.reject { |f| GROUPS.values.flatten.include?(File.basename(f)) }
        when *GROUPS.keys then files.select { |f| GROUPS[group].include?(File.basename(f)) }
        else abort "run_all.rb: unknown group #{group.inspect} (debian, sidekiq7, sidekiq8, gems, fetch_gems, rails, differential; none: all)"
        end
ENV["KIQD_INTEROP_WORLDS"] = GROUP_WORLDS[group] if GROUP_WORLDS.key?(group)
files.each { |f| require f }
