# Loaded by bench/backlog.sh with `sidekiq -r <abs path>/bench/sidekiq_backlog.rb`: the no-op job
# of bench/sidekiq_noop.rb (quiet logging), and the scheduler's poll_interval_average at 1 s as
# kiqd's row sets it, so the first poll comes within 5 s of start (Sidekiq's initial_wait is
# rand * 5 s when the average is set, 10 s more when it is not). The backlog is timed from the
# first move, so that wait does not count on either side.
require_relative "sidekiq_noop"

Sidekiq.configure_server do |c|
  if c.respond_to?(:[]=)
    c[:poll_interval_average] = 1 # 7.x: a Sidekiq::Config
  else
    Sidekiq.options[:poll_interval_average] = 1 # 6.4: the Sidekiq module
  end
end
