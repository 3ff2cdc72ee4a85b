# What the interop apps' jobs record of themselves, and what the tests read back: each job
# appends [jid, scope, start, end] (CLOCK_REALTIME seconds) to the Redis list `ledger` when it
# ends, so that concurrency is measured from the jobs themselves, whichever server ran them.
#
#   app side (inside Sidekiq or a runner):  Ledger.record(jid, "imports") { work }
#   test side (KiqdInterop::LedgerReads):   most_at_once("imports")
require "json"

module Ledger
  def self.record(jid, scope)
    started = Process.clock_gettime(Process::CLOCK_REALTIME)
    yield if block_given?
    ended = Process.clock_gettime(Process::CLOCK_REALTIME)
    Sidekiq.redis { |r| r.call("RPUSH", "ledger", JSON.generate([jid, scope, started, ended])) }
  end
end

module KiqdInterop
  module LedgerReads
    # The entries of `scope` (every entry when nil).
    def ledger(scope = nil)
      entries = redis.lrange("ledger", 0, -1).map { |e| JSON.parse(e) }
      scope ? entries.select { |e| e[1] == scope } : entries
    end

    # The most jobs of `scope` that ran at once: at each start, the spans that contain it.
    def most_at_once(scope = nil)
      spans = ledger(scope).map { |e| [e[2], e[3]] }
      spans.map { |s, _| spans.count { |a, b| a <= s && s < b } }.max.to_i
    end
  end
end
