# Sourced by the bench scripts after they set work (a temporary directory), redis_pid and
# drain_pid (both may stay empty): on exit, stops the drain helper (which stops its worker by
# PID) and the private redis-server, by their PIDs, and removes $work; Ctrl-C and TERM exit
# through it with 130 and 143.
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -n $drain_pid ]] && kill -0 "$drain_pid" 2>/dev/null; then
        kill -TERM "$drain_pid" 2>/dev/null || true   # the helper stops its worker by PID
        wait "$drain_pid" 2>/dev/null || true
    fi
    if [[ -n $redis_pid ]] && kill -0 "$redis_pid" 2>/dev/null; then
        kill -TERM "$redis_pid" 2>/dev/null || true
        wait "$redis_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
