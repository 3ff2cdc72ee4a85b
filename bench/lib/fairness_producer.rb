# The plain Ruby producer of bench/fairness.sh: Debian's Sidekiq (6.4.1) client, which knows
# nothing of tenants, pushing Test::Record jobs (kiqd_test_daemon) to `default` the way an app
# would. The same phases as bench/fairness_producer.cpp (kiqd's client), which the rows that
# need kiqd's push-time rules still use:
#
#   ruby -rsidekiq bench/lib/fairness_producer.rb REDIS_URL greedy JOBS JOB_MS
#       tenant "greedy" pushes its whole backlog at once: Sidekiq::Client.push_bulk, 1,000 a slice
#   ruby -rsidekiq bench/lib/fairness_producer.rb REDIS_URL small TENANTS PER_TENANT JOB_MS SPREAD
#       TENANTS small tenants ("small-00"..) push PER_TENANT jobs each with Sidekiq::Client.push,
#       one at a time, in a fixed random interleaving; job k once (k + 0.5) / total × 95 % of
#       SPREAD jobs have run (LLEN kiqd-test:ran), so they arrive while the backlog is worked off.
#
# Every job is {"class": "Test::Record", "args": [job seconds, tenant]}.
url, phase, *rest = ARGV
Sidekiq.configure_client { |c| c.redis = { url: url, size: 1 } }
Sidekiq.logger.level = Logger::WARN
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)

case phase
when 'greedy'
  jobs, job_ms = Integer(rest[0]), Integer(rest[1])
  args = [job_ms / 1000.0, 'greedy']
  jobs.times.each_slice(1000) do |slice|
    Sidekiq::Client.push_bulk('class' => 'Test::Record', 'queue' => 'default',
                              'args' => Array.new(slice.size) { args })
  end
when 'small'
  tenants, per, job_ms, spread = rest.map { |v| Integer(v) }
  order = (0...tenants).flat_map { |t| [format('small-%02d', t)] * per }.shuffle(random: Random.new(7))
  span = 0.95 * spread
  last_ran, last_progress = -1, Time.now
  order.each_with_index do |tenant, k|
    due = ((k + 0.5) / order.size * span).to_i
    loop do
      ran = Sidekiq.redis { |r| r.llen('kiqd-test:ran') }
      break if ran >= due
      if ran != last_ran
        last_ran, last_progress = ran, Time.now
      elsif Time.now - last_progress > 60
        abort "fairness_producer.rb: no job ran for 60 s (#{ran} of #{due})"
      end
      sleep 0.0005
    end
    Sidekiq::Client.push('class' => 'Test::Record', 'queue' => 'default',
                         'args' => [job_ms / 1000.0, tenant])
  end
else
  abort 'usage: ruby -rsidekiq fairness_producer.rb REDIS_URL greedy JOBS JOB_MS | ' \
        'small TENANTS PER_TENANT JOB_MS SPREAD'
end
