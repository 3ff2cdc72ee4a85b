# Sourced by bench/runners.sh: the Rails app on PostgreSQL (tests/runners/rails_pg_app), an
# ActiveJob that reads one account row and updates it (BumpJob), RAILS_JOBS of them, at
# concurrency CONCURRENCY:
#   * kiqd + kiqd-ruby-runner with the runner pool's defaults (processes: the CPUs; threads:
#     concurrency / processes, rounded up); Active Record's pool per process = its threads
#     (KIQD_RUNNER_THREADS);
#   * one Sidekiq 6.4.1 process, `sidekiq -r <app> -c CONCURRENCY`, pool = concurrency;
#   * the same on Rails 7.2 with Sidekiq 7.3.10, and on Rails 8.1 with Sidekiq 8.1.7 (Ruby 3.3),
#     each from its test world (scripts/world sidekiq73 / sidekiq81), the runner on it too.
# Every system runs the app quiet (APP_LOG_LEVEL=warn). A private PostgreSQL cluster
# (tests/support/pg_cluster.sh) serves the rows, one database, 100 accounts; a row counts only
# if every job committed its update (the balances grew by RAILS_JOBS, nothing in the retry or
# dead set), else it says FAILED. Uses runners.sh's helpers (row, drain, pss_mb, cpu_s, ...).

rails_app=$repo/tests/runners/rails_pg_app
pg_pid=""
pg_dir=""

# psql against the benchmark's database.
pg_sql() { psql -h 127.0.0.1 -p "$pg_port" -U postgres -d rails_bench -Atqc "$1"; }

start_pg() {
    pg_port=$(free_port)
    # Its own directory: the cluster runs as `postgres`, which cannot enter $work.
    pg_dir=$(mktemp -d "${TMPDIR:-/tmp}/kiqd-runners-bench-pg.XXXXXX")
    bash "$repo/tests/support/pg_cluster.sh" "$pg_dir" "$pg_port" >"$work/pg.log" 2>&1 &
    pg_pid=$!
    for _ in $(seq 600); do
        pg_isready -q -h 127.0.0.1 -p "$pg_port" && break
        kill -0 "$pg_pid" 2>/dev/null || die "the PostgreSQL cluster did not start: $(cat "$work/pg.log")"
        sleep 0.1
    done
    psql -h 127.0.0.1 -p "$pg_port" -U postgres -qc "CREATE DATABASE rails_bench" >/dev/null
    export DATABASE_HOST=127.0.0.1 DATABASE_PORT=$pg_port DATABASE_NAME=rails_bench APP_LOG_LEVEL=warn
    ACCOUNTS=100 ruby -e 'require ARGV[0] + "/config/environment"
        %w[schema seeds].each { |f| load Rails.root.join("db", "#{f}.rb").to_s }' "$rails_app" >"$work/schema.log" 2>&1 ||
        die "loading the app's schema failed: $(cat "$work/schema.log")"
}

stop_pg() {
    [[ -n $pg_pid ]] || return 0
    kill -INT "$pg_pid" 2>/dev/null || true
    wait "$pg_pid" 2>/dev/null || true
    pg_pid=""
    rm -rf "$pg_dir"
}

# rails_drain: drains RAILS_JOBS BumpJobs (the caller's workers are up) and checks that all
# of them committed; sets rate and verdict.
rails_drain() {
    local before after
    before=$(pg_sql "SELECT sum(balance) FROM accounts")
    rate=$(CLASS=aj:BumpJob drain "$RAILS_JOBS")
    verdict=""
    for _ in $(seq 300); do
        after=$(pg_sql "SELECT sum(balance) FROM accounts")
        (( after - before >= RAILS_JOBS )) && return 0
        (( $(rcli zcard retry) + $(rcli zcard dead) > 0 )) && break
        sleep 0.1
    done
    verdict="FAILED: $(( after - before )) of $RAILS_JOBS jobs committed, $(rcli zcard retry) in the retry set; "
}

run_rails_kiqd() {  # run_rails_kiqd VERSION RUBY...: kiqd + runner, the pool's defaults
    local version=$1; shift
    local mport; mport=$(free_port)
    local command; command=$(printf '"%s", ' "$@" "$RUNNER" --require "$rails_app")
    { yaml_head "$mport"; cat; } >"$work/kiqd.yml" <<YAML
runners:
  rails:
    command: [${command%, }]
handlers:
  "*": {runner: rails}
YAML
    rcli flushall >/dev/null
    REDIS_URL=$redis_url "$KIQD" -C "$work/kiqd.yml" >"$work/kiqd.log" 2>&1 &
    pids=($!)
    wait_runners_idle "$mport" "$(nproc)"
    local k0 c0 p0 k1 c1 p1
    k0=$(cpu_s --self "${pids[@]}"); c0=$(cpu_s --children "${pids[@]}"); p0=$(cpu_s "$pg_pid")
    rails_drain
    k1=$(cpu_s --self "${pids[@]}"); c1=$(cpu_s --children "${pids[@]}"); p1=$(cpu_s "$pg_pid")
    local pss; pss=$(pss_mb "${pids[@]}")
    stop_all
    row "kiqd + ruby runner, default runner settings (processes $(nproc), threads $(( (CONCURRENCY + $(nproc) - 1) / $(nproc) ))), Sidekiq $version, Rails app on PostgreSQL, BumpJob" \
        "$rate" "$pss" "${verdict}concurrency $CONCURRENCY; CPU µs/job: kiqd $(cpu_us_per_job "$k0" "$k1" "$RAILS_JOBS"), runners $(cpu_us_per_job "$c0" "$c1" "$RAILS_JOBS"), postgres $(cpu_us_per_job "$p0" "$p1" "$RAILS_JOBS")"
}

run_rails_sidekiq() {  # run_rails_sidekiq VERSION SIDEKIQ_COMMAND...: one Sidekiq process
    local version=$1; shift
    rcli flushall >/dev/null
    REDIS_URL=$redis_url RAILS_MAX_THREADS=$CONCURRENCY "$@" -r "$rails_app" \
        -c "$CONCURRENCY" -q default >"$work/sidekiq.log" 2>&1 &
    pids=($!)
    wait_processes 1
    local w0 p0 w1 p1 before
    before=$(wc -l <"$work/sidekiq.log")
    w0=$(cpu_s "${pids[@]}"); p0=$(cpu_s "$pg_pid")
    rails_drain
    w1=$(cpu_s "${pids[@]}"); p1=$(cpu_s "$pg_pid")
    local pss; pss=$(pss_mb "${pids[@]}")
    stop_all
    row "sidekiq $version x1, Rails app on PostgreSQL, BumpJob" "$rate" "$pss" \
        "${verdict}concurrency $CONCURRENCY, pool $CONCURRENCY; log lines during drain: $(( $(wc -l <"$work/sidekiq.log") - before )); CPU µs/job: sidekiq $(cpu_us_per_job "$w0" "$w1" "$RAILS_JOBS"), postgres $(cpu_us_per_job "$p0" "$p1" "$RAILS_JOBS")"
}

run_rails_rows() {
    if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
        echo "runners bench: no Rails row: PostgreSQL is not installed (Debian: postgresql)" >&2
        return 0
    fi
    start_pg
    [[ -n $sidekiq_bin ]] && run_rails_sidekiq "6.4.1 (Rails 6.1)" "$sidekiq_bin"
    run_rails_kiqd "6.4.1 (Rails 6.1)" /usr/bin/ruby
    local world version
    for world in sidekiq73 sidekiq81; do
        version=$("$repo/scripts/world" "$world" ruby -e 'require "sidekiq"; require "rails"
            print "#{Sidekiq::VERSION} (Rails #{Rails.version})"') ||
            die "the $world test world is not installed (bash scripts/install-gems $world)"
        # scripts/world execs the world's sidekiq and ruby: the measured pids are theirs.
        run_rails_sidekiq "$version" "$repo/scripts/world" "$world" sidekiq
        run_rails_kiqd "$version" "$repo/scripts/world" "$world" ruby
    done
    stop_pg
}
