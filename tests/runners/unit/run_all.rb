# Runs the runner library's unit tests (every *_test.rb here, or the files named first), in one
# process: see support.rb.
#   ruby tests/runners/unit/run_all.rb [FILE_test.rb ...] [minitest options]
files = []
files << ARGV.shift while ARGV.first&.end_with?("_test.rb")
files = Dir[File.join(__dir__, "*_test.rb")].sort if files.empty?
files.each { |f| require File.expand_path(f, __dir__) }

# minitest stops at an Interrupt that escapes a test and reports success for the tests run
# before it. Sidekiq::Shutdown is an Interrupt, so here that ends the suite with a failure.
module InterruptedRunFails
  def __run(*)
    super
  rescue Interrupt => e
    warn "#{e.class} escaped a test (#{e.message}): the run is incomplete"
    Minitest.after_run { exit 1 }
    raise
  end
end
Minitest.singleton_class.prepend(InterruptedRunFails)
