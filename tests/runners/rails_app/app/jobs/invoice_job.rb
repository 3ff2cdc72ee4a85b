# Autoloaded by Rails (Zeitwerk) when the runner resolves the class the adapter's wrapper names.
class InvoiceJob < ActiveJob::Base
  queue_as :default

  def perform(number)
    Rails.logger.info("invoice #{number} in #{Rails.env}")
    Sidekiq.redis { |r| r.rpush("app:done", JSON.generate(["InvoiceJob", job_id, number, provider_job_id, Rails.env])) }
  end
end
