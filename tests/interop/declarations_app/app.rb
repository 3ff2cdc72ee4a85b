# An app that declares in Ruby what kiqd's YAML does not restate: a capsule of one thread
# (Sidekiq 7 and later) and job classes with a queue of their own and GitLab-style worker
# attributes. Every job records when it ran in `ledger` (jid, queue, start, end).
require "sidekiq"
require "json"
require_relative "../ledger"

Sidekiq.configure_server do |config|
  config.logger.level = Logger::WARN
  config.capsule("single") do |cap|
    cap.concurrency = 1
    cap.queues = %w[single]
  end
end

# The class methods GitLab's WorkerAttributes concern adds, in a few lines.
module WorkerAttributes
  def self.included(base) = base.extend(ClassMethods)

  module ClassMethods
    def urgency(value) = (@urgency = value)
    def get_urgency = @urgency || :low
    def worker_resource_boundary(value) = (@boundary = value)
    def get_worker_resource_boundary = @boundary || :unknown
    def feature_category(value) = (@category = value)
    def get_feature_category = @category
    def idempotent! = (@idempotent = true)
    def idempotent? = @idempotent ? true : false
    def worker_has_external_dependencies? = false
    def get_tags = [:search]
  end
end
class SerialJob
  include Sidekiq::Job
  sidekiq_options queue: "single"

  def perform(_n) = Ledger.record(jid, "single") { sleep 0.3 }
end

class SearchIndexJob
  include Sidekiq::Job
  include WorkerAttributes
  sidekiq_options queue: "search"
  urgency :high
  worker_resource_boundary :cpu
  feature_category :global_search
  idempotent!

  def perform = Ledger.record(jid, "search") {}
end
