# Runs the interop files of one group (ctest runs the two groups side by side):
#   debian  the files that need only Debian's Sidekiq 6.4.1
#   gems    the files that load the gems of ../shared/gems (Sidekiq 7.3, unique jobs, fair
#           tenant, cron); each skips with a message where that folder is absent
#   (none)  every file
require "minitest/autorun"
GEM_FILES = %w[test_cron_interop.rb test_fair_tenant_gem_interop.rb test_sidekiq7_interop.rb
               test_sidekiq7_suite_interop.rb test_unique_gems_interop.rb].freeze
group = ARGV.shift
files = Dir[File.join(__dir__, "test_*.rb")].sort
files = case group
        when "debian" then files.reject { |f| GEM_FILES.include?(File.basename(f)) }
        when "gems" then files.select { |f| GEM_FILES.include?(File.basename(f)) }
        when nil then files
        else abort "run_all.rb: unknown group #{group.inspect} (debian, gems, or none for all)"
        end
files.each { |f| require f }
