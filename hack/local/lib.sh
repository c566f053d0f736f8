# Shared settings of the local control plane scripts (up.sh, down.sh, status.sh).
# Every port can be moved at once with AGENTPLANE_PORT_OFFSET (the e2e suite runs a second stack
# beside a developer's that way) or one by one with AGENTPLANE_<NAME>_PORT.

LOCAL_DIR=${LOCAL_DIR:-$(pwd)/.local}
RUN_DIR=$LOCAL_DIR/run
LOG_DIR=$LOCAL_DIR/logs
PKI_DIR=$LOCAL_DIR/pki
TOKEN_DIR=$LOCAL_DIR/tokens
KUBECONFIG_FILE=$LOCAL_DIR/kubeconfig
OFFSET=${AGENTPLANE_PORT_OFFSET:-0}

port() { # port NAME DEFAULT
  local var="AGENTPLANE_$1_PORT"
  echo "${!var:-$(($2 + OFFSET))}"
}

ETCD_PORT=$(port ETCD 12379)
ETCD_PEER_PORT=$(port ETCD_PEER 12380)
APISERVER_PORT=$(port APISERVER 16443)
KCM_PORT=$(port KCM 20257)
SCHEDULER_PORT=$(port SCHEDULER 20259)
KWOK_PORT=$(port KWOK 20247)
REDIS_PORT=$(port REDIS 16379)
POSTGRES_PORT=$(port POSTGRES 15432)
WATCH_HTTP_PORT=$(port WATCH_GATEWAY_HTTP 18101)
JAEGER_OTLP_GRPC_PORT=$(port JAEGER_OTLP_GRPC 14317)
JAEGER_OTLP_HTTP_PORT=$(port JAEGER_OTLP_HTTP 14318)
JAEGER_UI_PORT=$(port JAEGER_UI 16686)
JAEGER_QUERY_GRPC_PORT=$(port JAEGER_QUERY_GRPC 16685)
JAEGER_HEALTH_PORT=$(port JAEGER_HEALTH 13133)

# name grpc-port metrics-port, in start order.
SERVICE_TABLE="status-writer $(port STATUS_WRITER_GRPC 50052) $(port STATUS_WRITER_METRICS 9102)
event-emitter $(port EVENT_EMITTER_GRPC 50053) $(port EVENT_EMITTER_METRICS 9103)
job-gc $(port JOB_GC_GRPC 50054) $(port JOB_GC_METRICS 9104)
cancel-propagator $(port CANCEL_PROPAGATOR_GRPC 50055) $(port CANCEL_PROPAGATOR_METRICS 9105)
run-controller $(port RUN_CONTROLLER_GRPC 50056) $(port RUN_CONTROLLER_METRICS 9106)
watch-gateway $(port WATCH_GATEWAY_GRPC 50051) $(port WATCH_GATEWAY_METRICS 9101)"

# Components in start order; down.sh stops them in reverse.
COMPONENTS="jaeger etcd kube-apiserver kube-controller-manager kube-scheduler kwok redis postgres $(echo "$SERVICE_TABLE" | awk '{printf "%s ", $1}')"

# alive PID: running, and not a zombie waiting for its new parent to reap it.
alive() {
  local state
  state=$(awk '{sub(/.*\) /, ""); print $1}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

pid_of() { # prints the pid of a running component, or nothing
  local f="$RUN_DIR/$1.pid" pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if [ -n "$pid" ] && alive "$pid"; then echo "$pid"; fi
}

port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

die() { echo "error: $*" >&2; exit 1; }

# start NAME PORT CMD...: starts CMD in its own session unless NAME already runs; refuses a port
# (on 127.0.0.1) that something else holds. PORT "-": the process has no such port.
start() {
  local name=$1 port=$2; shift 2
  if [ -n "$(pid_of "$name")" ]; then
    echo "   $name already running (pid $(pid_of "$name"))"
    return 0
  fi
  if [ "$port" != - ] && port_taken "$port"; then
    die "port $port, wanted by $name, is taken by another process: stop it, or move agentplane's ports with AGENTPLANE_PORT_OFFSET=1000 (or AGENTPLANE_<NAME>_PORT)"
  fi
  if [ "$port" = - ]; then
    echo "   starting $name (log $LOG_DIR/$name.log)"
  else
    echo "   starting $name (port $port, log $LOG_DIR/$name.log)"
  fi
  setsid "$@" >>"$LOG_DIR/$name.log" 2>&1 < /dev/null &
  echo $! >"$RUN_DIR/$name.pid"
}

# wait_for NAME SECONDS CMD...: polls CMD until it succeeds; on timeout shows the log's tail.
wait_for() {
  local name=$1 secs=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if [ -z "$(pid_of "$name")" ]; then
      tail -n 20 "$LOG_DIR/$name.log" >&2 || true
      die "$name exited; its log is $LOG_DIR/$name.log"
    fi
    if [ $SECONDS -ge $deadline ]; then
      tail -n 20 "$LOG_DIR/$name.log" >&2 || true
      die "$name not ready after ${secs}s; its log is $LOG_DIR/$name.log"
    fi
    sleep 0.5
  done
}

http_ok() { curl -fsS -o /dev/null --max-time 2 "$1"; }

# pg_bin sets PG_BIN to the folder of PostgreSQL's server programs: Debian keeps them off PATH,
# under /usr/lib/postgresql/<version>/bin.
pg_bin() {
  PG_BIN=$(dirname "$(ls /usr/lib/postgresql/*/bin/postgres 2>/dev/null | sort -V | tail -n 1)")
  [ -x "$PG_BIN/postgres" ] || PG_BIN=$(dirname "$(command -v postgres 2>/dev/null || echo /nonexistent/postgres)")
  [ -x "$PG_BIN/postgres" ] || die "PostgreSQL is missing: run 'make deps' (Debian's postgresql package)"
}

# start_postgres LISTEN [PASSWORD_FILE]: starts PostgreSQL (pg_bin's) on POSTGRES_PORT at the
# addresses LISTEN (comma-separated), its data in $LOCAL_DIR/postgres, TCP only (no Unix socket),
# with a database "agentplane" owned by the user agentplane. Without PASSWORD_FILE every
# connection is trusted (make up: loopback only); with one, made once with a random password
# when missing, the user has that password and every TCP connection must give it (SCRAM), from
# any address (make cluster-up: pods reach it on the node's link). PostgreSQL refuses to run as
# root: as root, initdb and the server run as the postgres user inside a user namespace of their
# own (unshare maps that user to root outside), so they own the data directory wherever
# LOCAL_DIR is, even below a directory only root may enter.
start_postgres() {
  local listen=$1 pwfile=${2:-} data=$LOCAL_DIR/postgres
  local as_pg=() auth=(--auth=trust)
  if [ "$(id -u)" = 0 ]; then
    local pg_uid
    pg_uid=$(id -u postgres 2>/dev/null) || die "no postgres user to run PostgreSQL as (Debian's postgresql package makes one): run 'make deps'"
    as_pg=(unshare --user --map-user="$pg_uid" --map-group="$(id -g postgres)")
  fi
  if [ -n "$pwfile" ]; then
    [ -s "$pwfile" ] || (umask 077 && openssl rand -hex 16 >"$pwfile")
    auth=(--auth-host=scram-sha-256 --auth-local=trust)
  fi
  if [ ! -f "$data/PG_VERSION" ]; then
    rm -rf "$data" && mkdir -p "$data" && chmod 700 "$data"
    # The user namespace maps the postgres user to this one: initdb reads the password file (0600)
    # as its owner.
    local initdb_pw=()
    [ -z "$pwfile" ] || initdb_pw=(--pwfile="$pwfile")
    "${as_pg[@]}" "$PG_BIN/initdb" -D "$data" -U agentplane "${auth[@]}" "${initdb_pw[@]}" --encoding=UTF8 --no-sync >>"$LOG_DIR/postgres.log" 2>&1 ||
      { tail -n 20 "$LOG_DIR/postgres.log" >&2; die "initdb failed; its log is $LOG_DIR/postgres.log"; }
    if [ -n "$pwfile" ]; then
      # Pods connect from their own addresses: every address, each with the password.
      printf 'host all all 0.0.0.0/0 scram-sha-256\nhost all all ::/0 scram-sha-256\n' >>"$data/pg_hba.conf"
    fi
  fi
  start postgres "$POSTGRES_PORT" "${as_pg[@]}" "$PG_BIN/postgres" -D "$data" -p "$POSTGRES_PORT" \
    -c listen_addresses="$listen" -c unix_socket_directories= -c max_connections=50
  local psql=("$PG_BIN/psql" -X -q -h 127.0.0.1 -p "$POSTGRES_PORT" -U agentplane)
  if [ -n "$pwfile" ]; then psql=(env PGPASSWORD="$(cat "$pwfile")" "${psql[@]}"); fi
  pg_ready() { "${psql[@]}" -d postgres -c 'SELECT 1'; }
  wait_for postgres 30 pg_ready
  if ! "${psql[@]}" -A -t -d postgres -c "SELECT 1 FROM pg_database WHERE datname = 'agentplane'" | grep -qx 1; then
    "${psql[@]}" -d postgres -c 'CREATE DATABASE agentplane' >/dev/null
  fi
}
