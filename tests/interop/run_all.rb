# Runs the interop files of one group (ctest runs the groups side by side, two at a time):
#   debian    the files that need only Debian's Sidekiq 6.4.1
#   sidekiq7  the files that load Sidekiq 7.3 from ../shared/gems
#   gems      the files that load the client gems from ../shared/gems (unique jobs, fair tenant,
#             cron)
#   rails     the Rails app on a private PostgreSQL cluster (skips without PostgreSQL; its
#             Sidekiq 7.3 half skips without ../shared/gems)
#   (none)    every file
# The sidekiq7 and gems files skip with a message where ../shared/gems is absent.
require "minitest/autorun"
GROUPS = {
  "sidekiq7" => %w[test_sidekiq7_interop.rb test_sidekiq7_suite_interop.rb test_capsules7_interop.rb],
  "gems" => %w[test_cron_interop.rb test_cron2_interop.rb test_fair_tenant_gem_interop.rb test_unique_gems_interop.rb],
  "rails" => %w[test_rails_pg_interop.rb]
}.freeze
group = ARGV.shift
files = Dir[File.join(__dir__, "test_*.rb")].sort
files = case group
        when nil then files
        when "debian" then files.reject { |f| GROUPS.values.flatten.include?(File.basename(f)) }
        when *GROUPS.keys then files.select { |f| GROUPS[group].include?(File.basename(f)) }
        else abort "run_all.rb: unknown group #{group.inspect} (debian, sidekiq7, gems, rails; none: all)"
        end
files.each { |f| require f }
