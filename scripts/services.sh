#!/usr/bin/env bash
# Start the real services the tests use (PostgreSQL from Debian's packages, moto's
# standalone S3-protocol server, both on 127.0.0.1), run a command, stop them.
#   scripts/services.sh run -- CMD ...
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PG_PORT=${TEST_PG_PORT:-55432}
S3_PORT=${TEST_S3_PORT:-55000}
DIR="$ROOT/.services/$PG_PORT-$S3_PORT"  # one folder per port pair: runs side by side never collide
VENV=${VENV:-$ROOT/.venv}

as_pg() {  # initdb and postgres refuse to run as root
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_bin() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$d" ]; then
    echo "services: installing PostgreSQL from Debian's packages" >&2
    if [ "$(id -u)" = 0 ]; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    else
      sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    fi
    d=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  fi
  echo "$d"
}

start_pg() {
  local bin; bin=$(pg_bin)
  rm -rf "$DIR/pg"; mkdir -p "$DIR/pg"
  [ "$(id -u)" = 0 ] && chown -R postgres "$DIR/pg"
  as_pg "$bin/initdb" -D "$DIR/pg/data" -U postgres -A trust >"$DIR/pg-initdb.log" 2>&1
  as_pg "$bin/pg_ctl" -D "$DIR/pg/data" -l "$DIR/pg/server.log" -w \
    -o "-p $PG_PORT -h 127.0.0.1 -k $DIR/pg -F" start >/dev/null
  as_pg "$bin/createdb" -h 127.0.0.1 -p "$PG_PORT" -U postgres iceberg_test
  export TEST_PG_URL="postgresql+psycopg2://postgres@127.0.0.1:$PG_PORT/iceberg_test"
}

stop_pg() {
  local bin; bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$bin" ] && [ -d "$DIR/pg/data" ] && as_pg "$bin/pg_ctl" -D "$DIR/pg/data" -m fast stop >/dev/null 2>&1 || true
}

start_s3() {
  "$VENV/bin/moto_server" -H 127.0.0.1 -p "$S3_PORT" >"$DIR/moto.log" 2>&1 &
  echo $! >"$DIR/moto.pid"
  for _ in $(seq 1 100); do
    if "$VENV/bin/python" -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$S3_PORT/moto-api/')" 2>/dev/null; then
      export TEST_S3_ENDPOINT="http://127.0.0.1:$S3_PORT"; return 0
    fi
    sleep 0.2
  done
  echo "services: moto server did not start, see $DIR/moto.log" >&2; return 1
}

stop_s3() {
  [ -f "$DIR/moto.pid" ] && kill "$(cat "$DIR/moto.pid")" 2>/dev/null || true
  rm -f "$DIR/moto.pid"
}

case "${1:-}" in
  run)
    shift; [ "${1:-}" = "--" ] && shift
    mkdir -p "$DIR"
    trap 'stop_s3; stop_pg' EXIT
    start_pg
    start_s3
    echo "services: PostgreSQL on 127.0.0.1:$PG_PORT, S3 server on 127.0.0.1:$S3_PORT" >&2
    "$@"
    ;;
  *) echo "usage: scripts/services.sh run -- CMD ..." >&2; exit 2 ;;
esac
