#!/bin/sh
# A private PostgreSQL cluster for the Rails app test and bench/runners.sh's Rails row: creates
# a cluster in DIR/data (initdb; trust authentication, superuser `postgres`) and then *becomes*
# its postmaster (exec), listening on 127.0.0.1:PORT and on a Unix socket in DIR/socket only.
# The caller's child pid is therefore the postmaster's: stop it by that pid (SIGINT: fast
# shutdown) and wait for it. Run as root, the cluster runs as the `postgres` user (PostgreSQL
# refuses root); run as anyone else, as that user. Durability is off (fsync, full page writes):
# the cluster is thrown away.
# Usage: pg_cluster.sh DIR PORT        (DIR must not exist yet, or be empty)
# Exits 69 when PostgreSQL's server programs are not installed (Debian: `postgresql`).
set -eu
dir=$1
port=$2
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    echo "pg_cluster.sh: PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb)" >&2
    exit 69
fi
mkdir -p "$dir/socket"
as_owner=""
if [ "$(id -u)" = 0 ]; then
    chown -R postgres: "$dir"
    as_owner="setpriv --reuid=postgres --regid=postgres --init-groups --"
fi
$as_owner "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-sync \
    >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
exec $as_owner "$bin/postgres" -D "$dir/data" -p "$port" -k "$dir/socket" \
    -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c synchronous_commit=off
