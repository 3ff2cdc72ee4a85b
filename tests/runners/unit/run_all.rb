# Runs the runner library's unit tests (every *_test.rb here, or the files named first), in one
# process: see support.rb.
#   ruby tests/runners/unit/run_all.rb [FILE_test.rb ...] [minitest options]
files = []
files << ARGV.shift while ARGV.first&.end_with?("_test.rb")
files = Dir[File.join(__dir__, "*_test.rb")].sort if files.empty?
files.each { |f| require File.expand_path(f, __dir__) }
