# Jobs for the cases where one runner process holds several jobs at once (runner_test.cpp,
# "[threads]"). Loaded by app.rb.

# Starts, then waits for its gate (a token in app:gate:<key>) before it finishes: the test opens
# the gates once it has seen every job start, so "these ran at the same time" is a fact it
# observes, not a timing.
class GateJob
  include Sidekiq::Worker
  sidekiq_options queue: "default", retry: 3

  def perform(key)
    App.record("started", [key, Process.pid, Thread.current.object_id, jid])
    # A poll, not BLPOP: Sidekiq 7's Redis client gives up on a reply after 3 s.
    opened = 1200.times.any? { Sidekiq.redis { |r| r.lpop("app:gate:#{key}") } || (sleep(0.05) && nil) }
    raise "gate #{key} never opened" unless opened
    App.record("finished", [key, Process.pid, jid])
  end
end

# What a runner process's environment holds.
class EnvJob
  include Sidekiq::Worker
  sidekiq_options queue: "default", retry: false

  def perform
    App.record("env", {"redis_url" => ENV["REDIS_URL"], "app_flag" => ENV["APP_FLAG"],
                       "runner" => ENV["KIQD_RUNNER_NAME"], "threads" => ENV["KIQD_RUNNER_THREADS"],
                       "notify" => ENV["NOTIFY_SOCKET"]})
  end
end

# Sidekiq 7's sidekiq_retry_in may answer :kill or :discard (6.4 takes the answer as a delay).
class KillJob
  include Sidekiq::Worker
  sidekiq_options queue: "default", retry: 5
  sidekiq_retry_in { |_count, _ex| :kill }
  sidekiq_retries_exhausted { |msg, _ex| App.record("exhausted", [msg["jid"], "kill"]) }

  def perform
    raise "kill me"
  end
end

# A CPU-bound class, routed by its resource boundary (`handlers: "resource_boundary=cpu"`).
class CpuJob
  include Sidekiq::Worker
  sidekiq_options queue: "default", retry: false

  def perform(n)
    App.record("cpu", [n, ENV["KIQD_RUNNER_NAME"], Process.pid])
  end
end

# Sidekiq 7.3's iterable jobs: on quiet or shutdown (Sidekiq's `stopping?`) one saves its cursor
# and pushes itself back; the next run resumes from the cursor.
if defined?(Sidekiq::IterableJob)
  class CountJob
    include Sidekiq::IterableJob
    sidekiq_options queue: "default", retry: 3

    def build_enumerator(n, cursor:)
      array_enumerator((0...n).to_a, cursor: cursor)
    end

    def each_iteration(i, _n)
      App.record("iteration", [jid, i, Process.pid])
      sleep 0.05
    end
  end
end
