# An app that limits a queue with sidekiq-limit_fetch (4.4.1), as a Rails team writes it: the
# limit is set in Ruby at boot (`Sidekiq::Queue["imports"].limit = 2`), or, with LIMIT_IN_YAML
# set, not at all (the sidekiq.yml's `:limits:` then says it). Every job records when it ran in
# `ledger` (jid, queue, start, end).
require "sidekiq"
require "sidekiq-limit_fetch"
require "json"
require_relative "../ledger"

Sidekiq.configure_server { |config| config.logger.level = Logger::WARN }
Sidekiq::Queue["imports"].limit = 2 unless ENV["LIMIT_IN_YAML"]

class ImportJob
  include Sidekiq::Job
  sidekiq_options queue: "imports"

  def perform(_n) = Ledger.record(jid, "imports") { sleep 0.3 }
end
