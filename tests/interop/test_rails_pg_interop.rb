# A real Rails application on PostgreSQL (tests/runners/rails_pg_app: one app that loads the
# defaults of whichever Rails it runs on) under kiqd's preloading Ruby runner, on three stacks:
# Rails 6.1 + Sidekiq 6.4.1 (Debian's Ruby, ruby-rails, ruby-pg and ruby-sidekiq), Rails 7.2 +
# Sidekiq 7.3 (the sidekiq73 test world, Ruby 3.1) and Rails 8.1 + Sidekiq 8.1 (the sidekiq81
# world, Ruby 3.3). In a world, the enqueuing process and kiqd's runner processes start through
# scripts/world (the world's Ruby and bundle; the runner's pid is the one kiqd started: the script
# execs Ruby). ActiveJob jobs and native Sidekiq job classes update rows in transactions, jobs
# enqueue jobs through REDIS_URL, and a failing job's transaction rolls back and its retry
# commits. The app's initializer reads the database at boot, so the runner's master holds a
# connection when it forks. Checked: each job's ledger row is written exactly once, more than one
# runner process did the work, balances match the ledger, no PG:: connection errors, and
# pg_stat_activity never shows more connections than processes x threads + 1 per process.
#
# One private PostgreSQL cluster (tests/support/pg_cluster.sh, as the `postgres` user when run as
# root, on a free loopback port) serves the whole file, a database per test; it is stopped by its
# PID when the run ends. Fails (does not skip) when PostgreSQL, Debian's Rails or pg, or a world
# is not installed.
require "support"

module KiqdInterop
  # The file's PostgreSQL cluster: started on first use, stopped (SIGINT: fast shutdown) by its
  # PID after the run, and KILLed by the suite's after_run if that did not work.
  module PgCluster
    SCRIPT = File.join(ROOT, "tests", "support", "pg_cluster.sh")

    # Why this machine cannot run the test, or nil. (This file's own Ruby, Debian's, reads the
    # database with ruby-pg; the Rails 6.1 stack is Debian's ruby-rails.)
    def self.missing
      return "PostgreSQL is not installed (Debian: postgresql; bash scripts/install-deps)" if Dir["/usr/lib/postgresql/*/bin/initdb"].empty?
      %w[railties activerecord pg].each do |gem|
        return "the #{gem} gem is not installed (Debian: ruby-rails, ruby-pg)" if Gem::Specification.find_all_by_name(gem).empty?
      end
      nil
    end

    def self.port = start[:port]

    def self.start
      @cluster ||= begin
        require "pg"
        dir = Dir.mktmpdir("kiqd-pg-")
        port = TestRedis.free_port
        log = "#{dir}.log"
        pid = Process.spawn("/bin/sh", SCRIPT, dir, port.to_s, in: File::NULL, out: log, err: [:child, :out])
        child = Child.new("postgres", pid, log)
        Minitest.after_run { stop(child, dir, log) }
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 60
        begin
          PG.connect(host: "127.0.0.1", port: port, user: "postgres", dbname: "postgres").close
        rescue PG::ConnectionBad
          raise "the PostgreSQL cluster did not start:\n#{child.log}" unless child.alive?
          raise "the PostgreSQL cluster did not answer within 60 s:\n#{child.log}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
          sleep 0.05
          retry
        end
        {port: port, child: child}
      end
    end

    def self.stop(child, dir, log)
      child.signal("INT")
      unless child.wait(30)
        child.signal("KILL")
        child.wait(5)
      end
      if ENV["KIQD_INTEROP_KEEP"]
        puts "\n[interop] the PostgreSQL cluster is kept in #{dir} (log #{log})"
      else
        FileUtils.rm_rf([dir, log])
      end
    end

    def self.connect(dbname)
      port = start[:port] # (requires pg)
      PG.connect(host: "127.0.0.1", port: port, user: "postgres", dbname: dbname)
    end
  end
end

class RailsPgInteropTest < Minitest::Test
  include KiqdInterop::Helpers

  APP = File.join(KiqdInterop::ROOT, "tests", "runners", "rails_pg_app")
  RUNNER = File.join(KiqdInterop::ROOT, "runners", "ruby", "kiqd-ruby-runner")
  WORLD = File.join(KiqdInterop::ROOT, "scripts", "world")
  PROCESSES = 2
  CONCURRENCY = 10
  THREADS = (CONCURRENCY + PROCESSES - 1) / PROCESSES # the runner pool's default `threads`
  JOBS = 200 # half DepositJob (ActiveJob), half LedgerWorker (Sidekiq::Worker)
  FAN_OUTS = 5
  FLAKY_ACCOUNT = 10 # its own account: its balance shows how many attempts committed

  def test_rails_6_1_on_sidekiq_6_4
    run_rails_app(nil, rails: "6.1", sidekiq: "6.4")
  end

  def test_rails_7_2_on_sidekiq_7_3
    run_rails_app("sidekiq73", rails: "7.2", sidekiq: "7.3")
  end

  def test_rails_8_1_on_sidekiq_8_1
    run_rails_app("sidekiq81", rails: "8.1", sidekiq: "8.1")
  end

  private

  # A Ruby command: Debian's Ruby (world nil), or the world's through scripts/world.
  def ruby_command(world, *args)
    world ? [WORLD, world, "ruby", *args] : [KiqdInterop::RUBY, *args]
  end

  # Fails unless the stack loads: the world (or Debian's packages) with Rails, Sidekiq and pg.
  def check_stack(world)
    missing = KiqdInterop::PgCluster.missing
    flunk "the Rails/PostgreSQL test needs #{missing}" if missing
    return unless world
    out = IO.popen(ruby_command(world, "-e", 'require "rails"; require "active_record"; require "sidekiq"; require "pg"'),
                   err: [:child, :out], &:read)
    flunk "the #{world} world does not load Rails, Sidekiq and pg (run: bash scripts/install-gems #{world}):\n#{out}" unless $?.success?
  end

  def run_rails_app(world, rails:, sidekiq:)
    check_stack(world)
    @db = "rails_pg_#{rails.delete(".")}_sidekiq_#{sidekiq.delete(".")}"
    admin = KiqdInterop::PgCluster.connect("postgres")
    admin.exec("CREATE DATABASE #{@db}")
    admin.close
    @pg = KiqdInterop::PgCluster.connect(@db)
    app_env = {"DATABASE_HOST" => "127.0.0.1", "DATABASE_PORT" => KiqdInterop::PgCluster.port.to_s,
               "DATABASE_NAME" => @db}

    enqueue(world, rails, sidekiq, app_env)
    # The enqueuing process has gone: from here on every connection to the database is the runners'.
    wait_until(10, "the enqueuing process's connection to close") { connections.zero? }
    sampler = start_connection_sampler

    kiqd = start_kiqd({"concurrency" => CONCURRENCY,
                       "runners" => {"rails" => {"command" => ruby_command(world, RUNNER, "--require", APP),
                                                 "processes" => PROCESSES, "env" => app_env}},
                       "handlers" => {"*" => {"runner" => "rails"}}})
    keys = (0...JOBS).map { |i| i.even? ? "deposit-#{i}" : "ledger-#{i}" }
    wait_until(180, "#{JOBS} jobs and FlakyWorker's retry to commit their ledger rows") do
      committed = ledger_counts
      keys.all? { |k| committed[k] } && committed["flaky"]
    end
    # The runner's master booted the app on the stack under test.
    assert_match(/runner=rails master pid=\d+ booted \(kiqd-ruby-runner \S+ \(ruby [\d.]+, sidekiq #{Regexp.escape(sidekiq)}\.\d+\)\)/,
                 kiqd.log)

    counts = ledger_counts
    keys.each { |k| assert_equal 1, counts[k], "job #{k} must write its ledger row exactly once" }
    pids = @pg.exec("SELECT DISTINCT pid FROM ledger_entries WHERE job_key LIKE 'deposit-%' OR job_key LIKE 'ledger-%'")
              .map { |r| r["pid"].to_i }
    assert_operator pids.size, :>, 1, "more than one runner process must have run the #{JOBS} jobs (pids #{pids})"
    refute_includes pids, kiqd.pid

    # The first attempt's credit and ledger row rolled back; the retry (through kiqd's retry set,
    # after sidekiq_retry_in's second plus jitter) committed its own.
    assert_equal 2, @pg.exec("SELECT count(*) FROM attempts WHERE job_key = 'flaky'").getvalue(0, 0).to_i
    assert_equal [["2", "100"]], @pg.exec("SELECT attempt, amount FROM ledger_entries WHERE job_key = 'flaky'").values
    assert_equal 100, balance(FLAKY_ACCOUNT)
    assert_match(/flaky: attempt 1 fails on purpose/, kiqd.log)

    # Every balance is the sum of its committed ledger rows: no update without its row, or the
    # other way round.
    @pg.exec(<<~SQL).each { |r| assert_equal r["ledger"].to_i, r["balance"].to_i, "account #{r["id"]}" }
      SELECT a.id, a.balance, COALESCE(SUM(l.amount), 0) AS ledger
      FROM accounts a LEFT JOIN ledger_entries l ON l.account_id = a.id GROUP BY a.id, a.balance
    SQL

    # Jobs that enqueue jobs: the app's Sidekiq client inside a runner process reaches Redis
    # through REDIS_URL (kiqd's redis.url: its own environment has none), as under `sidekiq`.
    children = (0...FAN_OUTS).flat_map { |i| ["fan-#{i}/active_job", "fan-#{i}/sidekiq"] }
    wait_until(30, "the jobs FanOutJob enqueued (through REDIS_URL) to commit") do
      committed = ledger_counts
      children.all? { |k| committed[k] } || (failed_fan_out && flunk("FanOutJob failed: #{failed_fan_out}"))
    end
    counts = ledger_counts
    (0...FAN_OUTS).each { |i| assert_equal 1, counts["fan-#{i}"] }
    children.each { |k| assert_equal 1, counts[k], "job #{k} must write its ledger row exactly once" }
    assert_equal 0, Sidekiq::RetrySet.new.size + Sidekiq::DeadSet.new.size, "nothing else may have failed"

    max, busy = sampler.stop
    assert_operator busy, :>, 0, "pg_stat_activity must have shown the runners' connections while they ran jobs"
    limit = PROCESSES * THREADS + PROCESSES
    assert_operator max, :<=, limit,
                    "connections to #{@db}: at most processes x threads + 1 per process (#{limit}), saw #{max}"
    refute_match(/PG::|ActiveRecord::ConnectionNotEstablished|ActiveRecord::ConnectionTimeoutError/, kiqd.log)
  ensure
    sampler&.stop
    @pg&.close
  end

  # Loads the schema, seeds the accounts and pushes every job with the app's own client, in a Ruby
  # that boots the app on the stack under test (and says so: its Rails and Sidekiq versions).
  def enqueue(world, rails, sidekiq, app_env)
    body = <<~RUBY
      require #{File.join(APP, "config", "environment").inspect}
      unless Rails::VERSION::STRING.start_with?("#{rails}.") && Sidekiq::VERSION.start_with?("#{sidekiq}.")
        raise "loaded Rails \#{Rails::VERSION::STRING} and Sidekiq \#{Sidekiq::VERSION}, not #{rails} and #{sidekiq}"
      end
      load Rails.root.join("db", "schema.rb").to_s
      load Rails.root.join("db", "seeds.rb").to_s
      FlakyWorker.perform_async(#{FLAKY_ACCOUNT}, "flaky")
      #{JOBS}.times do |i|
        account = 1 + i % 8
        i.even? ? DepositJob.perform_later(account, "deposit-\#{i}") : LedgerWorker.perform_async(account, "ledger-\#{i}")
      end
      #{FAN_OUTS}.times { |i| FanOutJob.perform_later(9, "fan-\#{i}") }
    RUBY
    # Debian's Sidekiq 6.4.1 loads redis-rb 4.8, quietly (write_ruby_script); a world's 7.x/8.x
    # talk to Redis through redis-client, and the world has no redis-rb.
    script = world ? File.join(tmpdir, "enqueue.rb").tap { |path| File.write(path, body) } : write_ruby_script("enqueue.rb", body)
    out = IO.popen(app_env.merge("REDIS_URL" => redis_url, "APP_LOG_LEVEL" => "warn"),
                   ruby_command(world, script), err: [:child, :out], &:read)
    assert $?.success?, "enqueue.rb failed:\n#{out}"
    assert_equal JOBS + FAN_OUTS + 1, redis.llen("queue:default")
  end

  def connections
    ConnectionSampler.count(@pg, @db, @pg.backend_pid)
  end

  # {job_key => committed ledger rows}
  def ledger_counts
    @pg.exec("SELECT job_key, count(*) FROM ledger_entries GROUP BY job_key").to_h { |r| [r["job_key"], r["count"].to_i] }
  end

  def balance(account)
    @pg.exec_params("SELECT balance FROM accounts WHERE id = $1", [account]).getvalue(0, 0).to_i
  end

  # FanOutJob's error in the retry or dead set (e.g. the Redis it could not reach), or nil. (This
  # is Debian's Sidekiq 6.4.1 API: it names the ActiveJob class of 6.x's wrapper only; `wrapped`
  # is there in every version.)
  def failed_fan_out
    job = (Sidekiq::RetrySet.new.to_a + Sidekiq::DeadSet.new.to_a).find { |j| (j.item["wrapped"] || j.display_class) == "FanOutJob" }
    job && "#{job["error_class"]}: #{job["error_message"]}"
  end

  # Counts the app database's connections every 20 ms on a connection of its own (to another
  # database, so it does not count itself); stop returns [the most seen, samples above zero].
  class ConnectionSampler
    # Connections to `db` but the test's own (backend `own`).
    def self.count(pg, db, own)
      pg.exec_params("SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> $2", [db, own])
        .getvalue(0, 0).to_i
    end

    def initialize(db, own)
      @max = 0
      @busy = 0
      @stop = false
      @thread = Thread.new do
        pg = KiqdInterop::PgCluster.connect("postgres")
        until @stop
          n = self.class.count(pg, db, own)
          @max = n if n > @max
          @busy += 1 if n > 0
          sleep 0.02
        end
      ensure
        pg&.close
      end
    end

    def stop
      @stop = true
      @thread.join
      [@max, @busy]
    end
  end

  def start_connection_sampler = ConnectionSampler.new(@db, @pg.backend_pid)
end
