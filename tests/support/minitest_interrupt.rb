# frozen_string_literal: true

# minitest stops at an Interrupt that escapes a test and reports success for the tests it ran
# before it, with exit status 0. Sidekiq::Shutdown is an Interrupt, so a test of shutdown code
# could pass by ending the run. Required by every Ruby suite here: such a run fails instead.
require "minitest"

module KiqdInterruptedRunFails
  def __run(*)
    super
  rescue Interrupt => e
    warn "#{e.class} escaped a test (#{e.message}): the run is incomplete"
    Minitest.after_run { exit 1 }
    raise
  end
end
Minitest.singleton_class.prepend(KiqdInterruptedRunFails)
