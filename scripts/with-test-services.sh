#!/usr/bin/env bash
# with-test-services.sh CMD [ARGS...]
#
# Runs CMD with a throw-away Redis and PostgreSQL on free loopback ports, then
# stops them and removes their data. Installs redis-server and postgresql with
# apt-get when they are missing (CI runs as root on a fresh Debian machine),
# and the other programs the tests run: python3, nodejs and npm, curl, and chromium
# with a font for the dashboard's browser test.
# CMD sees:
#   THROTTLE_TEST_REDIS_URL      redis://127.0.0.1:PORT/0
#   THROTTLE_TEST_REDIS_SERVER   path of redis-server (tests that stop/start Redis use it)
#   THROTTLE_TEST_DATABASE_URL   postgres://postgres@127.0.0.1:PORT/throttle_test?sslmode=disable
set -euo pipefail

log() { echo "with-test-services: $*" >&2; }

find_pg_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && { echo "$d"; return 0; }
  done
  return 1
}

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
find_pg_bin >/dev/null || need+=(postgresql)
# The examples' tests run the Python, Node and curl clients for real.
command -v python3 >/dev/null 2>&1 || need+=(python3)
command -v node >/dev/null 2>&1 || need+=(nodejs)
# npx runs the OpenAPI linter and the TypeScript tools of the tests (Debian's
# nodejs comes without npm).
command -v npx >/dev/null 2>&1 || need+=(npm)
command -v curl >/dev/null 2>&1 || need+=(curl)
# The dashboard test drives Debian's headless Chromium (cmd/throttle/dashboard_test.go).
[ -x /usr/bin/chromium ] || need+=(chromium)
[ -d /usr/share/fonts/truetype/dejavu ] || need+=(fonts-dejavu-core)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    log "missing ${need[*]}: install them (apt-get install ${need[*]}) or run as root"
    exit 1
  fi
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${need[@]}" ca-certificates >/dev/null
fi
PG_BIN=$(find_pg_bin)

free_port() {
  python3 - <<'PY' 2>/dev/null || echo $((20000 + RANDOM % 20000))
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()
PY
}

work=$(mktemp -d /tmp/throttle-test.XXXXXX)
chmod 755 "$work"
redis_pid=""
pg_started=""
pg_user=""
cleanup() {
  set +e
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
  if [ -n "$pg_started" ]; then
    if [ -n "$pg_user" ]; then
      su "$pg_user" -s /bin/sh -c "'$PG_BIN/pg_ctl' -D '$work/pg' -m immediate stop" >/dev/null 2>&1
    else
      "$PG_BIN/pg_ctl" -D "$work/pg" -m immediate stop >/dev/null 2>&1
    fi
  fi
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

# Redis: no persistence, loopback only.
redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$work" --logfile "$work/redis.log" --daemonize no &
redis_pid=$!
for _ in $(seq 1 100); do
  redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
  sleep 0.1
done
redis-cli -p "$redis_port" ping >/dev/null || { log "redis did not start"; cat "$work/redis.log" >&2; exit 1; }

# PostgreSQL refuses to run as root: run it as the postgres user then.
pg_port=$(free_port)
mkdir -p "$work/pg" "$work/pgsock"
run_pg() { "$@"; }
if [ "$(id -u)" = 0 ]; then
  pg_user=postgres
  id postgres >/dev/null 2>&1 || useradd --system --home-dir "$work" --shell /bin/sh postgres
  chown -R postgres "$work/pg" "$work/pgsock"
  run_pg() { su postgres -s /bin/sh -c "$(printf '%q ' "$@")"; }
fi
run_pg "$PG_BIN/initdb" -D "$work/pg" -U postgres --auth=trust -E UTF8 --no-sync >"$work/initdb.log" 2>&1 \
  || { log "initdb failed"; cat "$work/initdb.log" >&2; exit 1; }
run_pg "$PG_BIN/pg_ctl" -D "$work/pg" -l "$work/pg/server.log" -w -t 60 start \
  -o "-p $pg_port -c listen_addresses=127.0.0.1 -k $work/pgsock -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" >/dev/null \
  || { log "postgres did not start"; cat "$work/pg/server.log" >&2; exit 1; }
pg_started=1
"$PG_BIN/psql" -h 127.0.0.1 -p "$pg_port" -U postgres -q -c "CREATE DATABASE throttle_test" >/dev/null

export THROTTLE_TEST_REDIS_URL="redis://127.0.0.1:$redis_port/0"
export THROTTLE_TEST_REDIS_SERVER="$(command -v redis-server)"
export THROTTLE_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$pg_port/throttle_test?sslmode=disable"
log "redis on :$redis_port, postgres on :$pg_port"

set +e
"$@"
status=$?
exit $status
