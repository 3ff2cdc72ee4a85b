# Sourced by the bench scripts. start_redis PORT DIR [ARGS...] starts a private, non-persistent
# redis-server on 127.0.0.1:PORT (its log in DIR/redis.log; ARGS go to redis-server too, such as
# a --tls-port), sets port, redis_pid and redis_url,
# and returns once it answers PING; the caller stops it by redis_pid. rcli runs redis-cli against
# it. Uses the caller's die().
start_redis() {
    port=$1
    local dir=$2
    shift 2
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$dir" --logfile "$dir/redis.log" "$@" &
    redis_pid=$!
    redis_url="redis://127.0.0.1:$port/0"
    for _ in $(seq 100); do
        [[ $(rcli ping 2>/dev/null || true) == PONG ]] && return 0
        kill -0 "$redis_pid" 2>/dev/null || die "redis-server exited; log: $(cat "$dir/redis.log")"
        sleep 0.05
    done
    die "redis-server did not answer on port $port"
}
rcli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }
