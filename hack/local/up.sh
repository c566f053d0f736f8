#!/usr/bin/env bash
# Starts a real local control plane as plain processes, with no cluster and no Docker:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok (one fake node that runs
# Pods and completes Job pods), redis-server, PostgreSQL (job-gc's run archive), every agentplane
# service, and Jaeger when
# `make tools-jaeger` has built it. Running it again starts only what is not running. `make up`
# calls it with the tool paths; `make down` undoes it.
#
# Knobs besides the ports (lib.sh): AGENTPLANE_CONTROL_PLANE_ONLY=1 starts the Kubernetes part
# only (no Redis, Jaeger or services: the e2e system suite runs those as containers);
# AGENTPLANE_APISERVER_BIND_ADDRESS (127.0.0.1) is where kube-apiserver listens;
# AGENTPLANE_APISERVER_ADVERTISE_ADDRESS (127.0.0.1) is the address it publishes as the
# `kubernetes` Service's endpoint (`make cluster-up` gives both an address its pods reach; a
# loopback one publishes none, as pods could not reach it anyway);
# AGENTPLANE_APISERVER_OTLP_ENDPOINT (host:port, OTLP gRPC) makes kube-apiserver export its spans
# there (the local Jaeger's when it runs); AGENTPLANE_ADMISSION_POLICIES=0 leaves out the admission
# policies and the cancel switch, AGENTPLANE_CRDS=0 the CRDs (charts install them); AGENTPLANE_KCM_QPS (100) is kube-controller-manager's
# request rate to the API server (burst twice it); AGENTPLANE_ARCHIVE=0 starts job-gc and
# watch-gateway without the run archive (the charts' default; PostgreSQL still starts).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"

: "${KUBE_DIR:?set KUBE_DIR (make up does)}" "${ETCD:?}" "${KWOK:?}" "${KWOK_STAGES:?}" "${SERVICES_BIN:?}"
NAMESPACE=${AGENTPLANE_NAMESPACE:-agents}
NODE_NAME=${AGENTPLANE_NODE_NAME:-kwok-node-0}

for bin in "$ETCD" "$KUBE_DIR/kube-apiserver" "$KUBE_DIR/kube-controller-manager" "$KUBE_DIR/kube-scheduler" "$KUBE_DIR/kubectl" "$KWOK"; do
  [ -x "$bin" ] || die "$bin is missing: run 'make tools'"
done
ls "$KWOK_STAGES"/*.yaml >/dev/null 2>&1 || die "kwok stages missing in $KWOK_STAGES: run 'make tools'"
command -v redis-server >/dev/null || die "redis-server is missing: run 'make deps'"
pg_bin
command -v openssl >/dev/null || die "openssl is missing: run 'make deps'"
command -v curl >/dev/null || die "curl is missing: run 'make deps'"
CONTROL_PLANE_ONLY=${AGENTPLANE_CONTROL_PLANE_ONLY:-0}
ARCHIVE=${AGENTPLANE_ARCHIVE:-1}
if [ "$CONTROL_PLANE_ONLY" != 1 ]; then
  while read -r svc _ _; do
    [ -x "$SERVICES_BIN/$svc" ] || die "$SERVICES_BIN/$svc is missing: run 'make build'"
  done <<<"$SERVICE_TABLE"
fi
APISERVER_BIND=${AGENTPLANE_APISERVER_BIND_ADDRESS:-127.0.0.1}
APISERVER_ADVERTISE=${AGENTPLANE_APISERVER_ADVERTISE_ADDRESS:-127.0.0.1}
# Where the kubeconfig points: the address kube-apiserver listens on, or loopback when it listens
# on loopback or every address.
case $APISERVER_BIND in
  0.0.0.0 | 127.* | ::) APISERVER_HOST=127.0.0.1 ;;
  *) APISERVER_HOST=$APISERVER_BIND ;;
esac
# A loopback advertise address cannot be the `kubernetes` Service's endpoint (kube-apiserver
# refuses it): no endpoint reconciler then. Otherwise the default lease reconciler keeps it.
endpoint_args=(--endpoint-reconciler-type none)
case $APISERVER_ADVERTISE in 127.*) ;; *) endpoint_args=() ;; esac
APISERVER_OTLP=${AGENTPLANE_APISERVER_OTLP_ENDPOINT:-}
# kube-controller-manager's default client rate (20 requests/s, burst 30) paces the Job controller
# (a pod create and a few status updates per Job), which hundreds of runs at once (the e2e fault
# rounds, the benchmarks) wait on.
KCM_QPS=${AGENTPLANE_KCM_QPS:-100}
WITH_JAEGER=0
if [ "$CONTROL_PLANE_ONLY" != 1 ] && [ -n "${JAEGER:-}" ] && [ -x "$JAEGER" ]; then
  WITH_JAEGER=1
  APISERVER_OTLP=${APISERVER_OTLP:-127.0.0.1:$JAEGER_OTLP_GRPC_PORT}
fi

mkdir -p "$RUN_DIR" "$LOG_DIR" "$PKI_DIR" "$LOCAL_DIR/etcd"
KUBECTL=("$KUBE_DIR/kubectl" --kubeconfig "$KUBECONFIG_FILE")

# --- keys and the kubeconfig (made once, kept across restarts) ---
if [ ! -f "$PKI_DIR/token" ]; then
  echo ">> creating keys in $PKI_DIR"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=agentplane-local-ca" \
    -keyout "$PKI_DIR/ca.key" -out "$PKI_DIR/ca.crt" 2>/dev/null
  openssl genrsa -out "$PKI_DIR/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI_DIR/sa.key" -pubout -out "$PKI_DIR/sa.pub" 2>/dev/null
  openssl rand -hex 32 >"$PKI_DIR/token.tmp"
  echo "$(cat "$PKI_DIR/token.tmp"),agentplane-admin,agentplane-admin,system:masters" >"$PKI_DIR/tokens.csv"
  mv "$PKI_DIR/token.tmp" "$PKI_DIR/token"
  chmod 600 "$PKI_DIR"/*.key "$PKI_DIR/token" "$PKI_DIR/tokens.csv"
fi
# issue NAME SUBJECT [EXT]: a key and a certificate signed by the local CA, unless they exist for
# the same subject and extensions (so a changed address gets a new serving certificate).
issue() {
  local name=$1 subj=$2 ext=${3:-}
  local want="$subj|$ext"
  [ -f "$PKI_DIR/$name.crt" ] && [ "$(cat "$PKI_DIR/$name.req" 2>/dev/null)" = "$want" ] && return 0
  openssl req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$PKI_DIR/$name.key" -out "$PKI_DIR/$name.csr" 2>/dev/null
  printf '%s\n' "$ext" >"$PKI_DIR/$name.ext"
  openssl x509 -req -in "$PKI_DIR/$name.csr" -CA "$PKI_DIR/ca.crt" -CAkey "$PKI_DIR/ca.key" -CAcreateserial \
    -days 3650 ${ext:+-extfile "$PKI_DIR/$name.ext"} -out "$PKI_DIR/$name.crt" 2>/dev/null
  chmod 600 "$PKI_DIR/$name.key"
  echo "$want" >"$PKI_DIR/$name.req"
}
# kube-apiserver's serving certificate names every address a client may dial: loopback, the
# advertise and bind addresses, and the `kubernetes` Service (its ClusterIP and DNS names), which
# in-cluster clients use.
sans="IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
for a in "$APISERVER_ADVERTISE" "$APISERVER_HOST"; do
  case ",$sans," in *",IP:$a,"*) ;; *) sans="$sans,IP:$a" ;; esac
done
issue apiserver "/CN=kube-apiserver" "subjectAltName=$sans"
# The front-proxy trust: a CA of its own (not the cluster CA, whose client certificates are users)
# signing the client certificate kube-apiserver presents to aggregated API servers, which believe
# the user it names in X-Remote-User only on that certificate.
if [ ! -f "$PKI_DIR/front-proxy-ca.crt" ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=agentplane-local-front-proxy-ca" \
    -keyout "$PKI_DIR/front-proxy-ca.key" -out "$PKI_DIR/front-proxy-ca.crt" 2>/dev/null
  chmod 600 "$PKI_DIR/front-proxy-ca.key"
fi
if [ ! -f "$PKI_DIR/front-proxy-client.crt" ]; then
  openssl req -newkey rsa:2048 -nodes -subj "/CN=front-proxy-client" -keyout "$PKI_DIR/front-proxy-client.key" \
    -out "$PKI_DIR/front-proxy-client.csr" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' >"$PKI_DIR/front-proxy-client.ext"
  openssl x509 -req -in "$PKI_DIR/front-proxy-client.csr" -CA "$PKI_DIR/front-proxy-ca.crt" -CAkey "$PKI_DIR/front-proxy-ca.key" \
    -CAcreateserial -days 3650 -extfile "$PKI_DIR/front-proxy-client.ext" -out "$PKI_DIR/front-proxy-client.crt" 2>/dev/null
  chmod 600 "$PKI_DIR/front-proxy-client.key"
fi
# kube-apiserver's client certificate for the kubelets' servers (logs, exec, port-forward).
issue apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "extendedKeyUsage=clientAuth"
cat >"$KUBECONFIG_FILE" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: agentplane-local
  cluster:
    server: https://$APISERVER_HOST:$APISERVER_PORT
    certificate-authority: $PKI_DIR/ca.crt
users:
- name: agentplane-admin
  user:
    token: $(cat "$PKI_DIR/token")
contexts:
- name: agentplane-local
  context:
    cluster: agentplane-local
    user: agentplane-admin
    namespace: $NAMESPACE
current-context: agentplane-local
EOF
chmod 600 "$KUBECONFIG_FILE"

if [ "$WITH_JAEGER" = 1 ]; then
  echo ">> jaeger"
  start jaeger "$JAEGER_OTLP_GRPC_PORT" env JAEGER_LISTEN_HOST=127.0.0.1 JAEGER_OTLP_GRPC_PORT="$JAEGER_OTLP_GRPC_PORT" \
    JAEGER_OTLP_HTTP_PORT="$JAEGER_OTLP_HTTP_PORT" JAEGER_UI_PORT="$JAEGER_UI_PORT" JAEGER_QUERY_GRPC_PORT="$JAEGER_QUERY_GRPC_PORT" \
    JAEGER_HEALTH_PORT="$JAEGER_HEALTH_PORT" "$JAEGER" --config "$HERE/jaeger.yaml"
  wait_for jaeger 60 http_ok "http://127.0.0.1:$JAEGER_HEALTH_PORT/status"
fi
# kube-apiserver traces its requests (W3C trace context from the services' clients joins them to
# the services' traces) when an OTLP endpoint is known.
tracing_args=()
if [ -n "$APISERVER_OTLP" ]; then
  cat >"$LOCAL_DIR/apiserver-tracing.yaml" <<EOF
apiVersion: apiserver.config.k8s.io/v1
kind: TracingConfiguration
endpoint: $APISERVER_OTLP
samplingRatePerMillion: 1000000
EOF
  tracing_args=(--tracing-config-file "$LOCAL_DIR/apiserver-tracing.yaml")
fi

echo ">> control plane"
start etcd "$ETCD_PORT" "$ETCD" --name agentplane-local --data-dir "$LOCAL_DIR/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "agentplane-local=http://127.0.0.1:$ETCD_PEER_PORT" --log-level warn \
  --unsafe-no-fsync --quota-backend-bytes 2147483648
wait_for etcd 30 port_taken "$ETCD_PORT"

start kube-apiserver "$APISERVER_PORT" "$KUBE_DIR/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address "$APISERVER_BIND" --advertise-address "$APISERVER_ADVERTISE" --secure-port "$APISERVER_PORT" \
  "${endpoint_args[@]}" \
  --tls-cert-file "$PKI_DIR/apiserver.crt" --tls-private-key-file "$PKI_DIR/apiserver.key" \
  --client-ca-file "$PKI_DIR/ca.crt" \
  --kubelet-client-certificate "$PKI_DIR/apiserver-kubelet-client.crt" --kubelet-client-key "$PKI_DIR/apiserver-kubelet-client.key" \
  --token-auth-file "$PKI_DIR/tokens.csv" --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction,OwnerReferencesPermissionEnforcement \
  --enable-aggregator-routing=true \
  --requestheader-client-ca-file "$PKI_DIR/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
  --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
  --requestheader-extra-headers-prefix X-Remote-Extra- \
  --proxy-client-cert-file "$PKI_DIR/front-proxy-client.crt" --proxy-client-key-file "$PKI_DIR/front-proxy-client.key" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$PKI_DIR/sa.pub" --service-account-signing-key-file "$PKI_DIR/sa.key" \
  --service-cluster-ip-range 10.96.0.0/16 --allow-privileged=true \
  --kubelet-preferred-address-types InternalIP "${tracing_args[@]}"
wait_for kube-apiserver 120 "${KUBECTL[@]}" get --raw /readyz

start kube-controller-manager "$KCM_PORT" "$KUBE_DIR/kube-controller-manager" \
  --kubeconfig "$KUBECONFIG_FILE" --authentication-kubeconfig "$KUBECONFIG_FILE" --authorization-kubeconfig "$KUBECONFIG_FILE" \
  --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --leader-elect=false \
  --service-account-private-key-file "$PKI_DIR/sa.key" --root-ca-file "$PKI_DIR/ca.crt" \
  --controllers '*' --node-monitor-grace-period 40s \
  --kube-api-qps "$KCM_QPS" --kube-api-burst $((KCM_QPS * 2))
start kube-scheduler "$SCHEDULER_PORT" "$KUBE_DIR/kube-scheduler" \
  --kubeconfig "$KUBECONFIG_FILE" --authentication-kubeconfig "$KUBECONFIG_FILE" --authorization-kubeconfig "$KUBECONFIG_FILE" \
  --bind-address 127.0.0.1 --secure-port "$SCHEDULER_PORT" --leader-elect=false

stage_args=()
for f in "$KWOK_STAGES"/*.yaml; do stage_args+=(--config "$f"); done
# kwok also plays the node's kubelet server (TLS, on 127.0.0.1), so `kubectl port-forward` works:
# a port-forward to port P of any pod on the fake node reaches 127.0.0.1:P, where the services
# listen. A pod that declares a service's local gRPC port stands for that service.
forwards=$(echo "$SERVICE_TABLE" | awk '{printf "    - ports: [%s]\n      target: {address: 127.0.0.1, port: %s}\n", $2, $2}')
cat >"$LOCAL_DIR/kwok-port-forward.yaml" <<EOF
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterPortForward
metadata:
  name: agentplane-services
spec:
  forwards:
$forwards
EOF
# ... and serves container logs (kubectl logs, agentctl logs): the same simulated log,
# hack/local/kwok-pod.log (CRI's log format), for every container of every pod it plays.
cat >"$LOCAL_DIR/kwok-logs.yaml" <<EOF
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: agentplane-simulated-logs
spec:
  logs:
  - logsFile: $ROOT/hack/local/kwok-pod.log
EOF
start kwok "$KWOK_PORT" "$KWOK" --kubeconfig "$KUBECONFIG_FILE" \
  --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
  --server-address "127.0.0.1:$KWOK_PORT" --node-ip 127.0.0.1 --node-port "$KWOK_PORT" \
  --tls-cert-file "$PKI_DIR/apiserver.crt" --tls-private-key-file "$PKI_DIR/apiserver.key" \
  --node-lease-duration-seconds 40 "${stage_args[@]}" --config "$LOCAL_DIR/kwok-port-forward.yaml" --config "$LOCAL_DIR/kwok-logs.yaml"

echo ">> node $NODE_NAME, namespace $NAMESPACE, CRDs"
"${KUBECTL[@]}" apply --server-side --force-conflicts -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $NODE_NAME
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: $NODE_NAME
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "5000"}
  capacity: {cpu: "32", memory: 256Gi, pods: "5000"}
---
apiVersion: v1
kind: Namespace
metadata:
  name: $NAMESPACE
EOF
# The CRDs, unless a chart is to install them (make cluster-up: agentplane-crds renders them as
# templates, and Helm takes over no object another tool made).
if [ "${AGENTPLANE_CRDS:-1}" = 1 ]; then
  "${KUBECTL[@]}" apply --server-side --force-conflicts -f "$ROOT/charts/agentplane-crds/files/crds" >/dev/null
  "${KUBECTL[@]}" wait --for condition=Established --timeout 60s -f "$ROOT/charts/agentplane-crds/files/crds" >/dev/null
fi
# The admission policies agentplane-crds installs with its chart (a run may use only what its
# creator may use; docs/security.md), unless a chart is to install them (make cluster-up).
if [ "${AGENTPLANE_ADMISSION_POLICIES:-1}" = 1 ]; then
  "${KUBECTL[@]}" apply --server-side --force-conflicts -f "$ROOT/hack/local/admission-policies.yaml" >/dev/null
  # The policies are in force only once kube-apiserver has loaded them (it rereads policies about
  # every second) and, for the recording policy, once it has the CRD's OpenAPI schema (published a
  # few seconds after the CRD is established; until then every AgentRun is refused with "Resource
  # kind ... not found"). A dry run proves neither: admitted before the policies load, it passes.
  # So a probe AgentRun is created for real: it must come back with the created-by record the
  # mutating policy writes, and changing that record must be refused ("cannot change", the
  # validating policies). The probe is deleted either way.
  run_admitted() {
    local made ok=1
    made=$("${KUBECTL[@]}" create -o 'jsonpath={.metadata.annotations.agents\.proompteng\.ai/created-by}' -f - 2>/dev/null <<'PROBE'
{"apiVersion":"agents.proompteng.ai/v1alpha1","kind":"AgentRun","metadata":{"name":"up-probe","namespace":"default"},"spec":{"agentRef":{"name":"x"},"runtime":{"type":"job"}}}
PROBE
) || ok=0
    [ -n "$made" ] || ok=0
    if [ "$ok" = 1 ] && "${KUBECTL[@]}" -n default annotate --dry-run=server --overwrite agentrun up-probe \
      agents.proompteng.ai/created-by=someone-else >/dev/null 2>&1; then
      ok=0
    fi
    # Without finalizers first: where the archive switch is on, the probe is held for an archive
    # no one writes ("default" is no namespace of job-gc's), and a probe left terminating would
    # refuse every later probe as AlreadyExists.
    "${KUBECTL[@]}" -n default patch agentrun up-probe --type merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1
    "${KUBECTL[@]}" -n default delete agentrun up-probe --ignore-not-found --wait=false >/dev/null 2>&1
    [ "$ok" = 1 ]
  }
  wait_for kube-apiserver 60 run_admitted
  # With the policies, the cancel switch cancel-propagator's chart turns on while cancel is enabled (the
  # admission policy agentplane-cancel-switch accepts a new spec.cancel only where it is on): on with the
  # service's default, off with JANGAR_ORCHESTRATION_CANCEL_ENABLED=false (then every new cancel is
  # refused, saying cancel is disabled).
  case $(echo "${JANGAR_ORCHESTRATION_CANCEL_ENABLED:-true}" | tr '[:upper:]' '[:lower:]') in
    1 | true | yes | on)
      "${KUBECTL[@]}" apply --server-side --force-conflicts -f "$ROOT/hack/local/cancel-switch.yaml" >/dev/null
      want_switch=yes ;;
    *)
      "${KUBECTL[@]}" delete --ignore-not-found -f "$ROOT/hack/local/cancel-switch.yaml" >/dev/null
      want_switch=no ;;
  esac
  # In force once the API server's authorizer (what the policy asks) sees it: RBAC reaches it
  # within a second or so; make up returns only then.
  switch_in_force() {
    [ "$("${KUBECTL[@]}" auth can-i cancel agentruns.agents.proompteng.ai -n "$NAMESPACE" \
      --as system:serviceaccount:agentplane:cancel-switch 2>/dev/null)" = "$want_switch" ]
  }
  wait_for kube-apiserver 30 switch_in_force
  # With the services, the archive switch job-gc's chart turns on with archive.enabled (the
  # policy agentplane-archive-hold then adds the archive's finalizer to every run created): on
  # while job-gc archives, off with AGENTPLANE_ARCHIVE=0.
  if [ "$CONTROL_PLANE_ONLY" != 1 ]; then
    # In $NAMESPACE only, where job-gc archives: a run held anywhere else would wait for ever.
    archive_switch=$(sed "s/^  namespace: agents\$/  namespace: $NAMESPACE/" "$ROOT/hack/local/archive-switch.yaml")
    if [ "$ARCHIVE" = 0 ]; then
      "${KUBECTL[@]}" delete --ignore-not-found -f - <<<"$archive_switch" >/dev/null
      want_archive=no
    else
      "${KUBECTL[@]}" apply --server-side --force-conflicts -f - <<<"$archive_switch" >/dev/null
      want_archive=yes
    fi
    archive_switch_in_force() {
      [ "$("${KUBECTL[@]}" auth can-i archive agentruns.agents.proompteng.ai -n "$NAMESPACE" \
        --as system:serviceaccount:agentplane:archive-switch 2>/dev/null)" = "$want_archive" ]
    }
    wait_for kube-apiserver 30 archive_switch_in_force
  fi
fi
node_ready() { "${KUBECTL[@]}" get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True; }
wait_for kwok 90 node_ready

if [ "$CONTROL_PLANE_ONLY" = 1 ]; then
  cat <<EOF

The local control plane is up without Redis or services (AGENTPLANE_CONTROL_PLANE_ONLY=1; state in $LOCAL_DIR).
  export KUBECONFIG=$KUBECONFIG_FILE
EOF
  exit 0
fi

# Service-to-service authentication, as in a cluster: status-writer and event-emitter accept
# only the controllers' ServiceAccounts, each presenting a token the API server issued for the
# audience "agentplane" (TokenRequest, what kubelet projects into a pod). Tokens last a week;
# running `make up` again mints fresh ones, and the controllers re-read the file when it changes.
CALLERS="run-controller job-gc cancel-propagator"
echo ">> ServiceAccount tokens for $CALLERS (in $TOKEN_DIR)"
mkdir -p "$TOKEN_DIR"
chmod 700 "$TOKEN_DIR"
for sa in $CALLERS; do
  "${KUBECTL[@]}" -n "$NAMESPACE" create serviceaccount "$sa" --dry-run=client -o yaml | "${KUBECTL[@]}" apply -f - >/dev/null
  (umask 077 && "${KUBECTL[@]}" -n "$NAMESPACE" create token "$sa" --audience agentplane --duration 168h >"$TOKEN_DIR/$sa.tmp")
  mv "$TOKEN_DIR/$sa.tmp" "$TOKEN_DIR/$sa"
done
# svc_auth SERVICE: the variables that turn authentication on for SERVICE.
svc_auth() {
  case " $CALLERS " in
    *" $1 "*) echo "JANGAR_SERVICE_TOKEN_FILE=$TOKEN_DIR/$1" ;;
  esac
  case $1 in
    status-writer | event-emitter) echo "JANGAR_GRPC_AUTH_MODE=token" ;;
  esac
}

# svc_env SERVICE: variables only SERVICE reads. run-controller's default image for runs that
# name none is the example agent (kwok never pulls it here; `make images` builds it).
svc_env() {
  case $1 in
    run-controller) echo "JANGAR_AGENT_IMAGE=${AGENTPLANE_AGENT_IMAGE:-agentplane/agent:dev}" ;;
    job-gc | watch-gateway) [ "$ARCHIVE" = 0 ] || echo "JANGAR_ARCHIVE_URL=$ARCHIVE_URL" ;;
  esac
}

# Every service exports its spans to the local Jaeger when it runs (OTLP over HTTP).
otel_env=()
if [ "$WITH_JAEGER" = 1 ]; then
  otel_env=(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$JAEGER_OTLP_HTTP_PORT")
fi

echo ">> redis and services"
start redis "$REDIS_PORT" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$LOCAL_DIR"
wait_for redis 15 port_taken "$REDIS_PORT"

# PostgreSQL for job-gc's run archive (docs/archive.md), from Debian's package as Redis is, its
# data in $LOCAL_DIR/postgres (kept by make down, like etcd's): on loopback, trust authentication,
# as the local Redis has no password (lib.sh, start_postgres).
start_postgres 127.0.0.1
ARCHIVE_URL="postgres://agentplane@127.0.0.1:$POSTGRES_PORT/agentplane?sslmode=disable"

# watch-gateway follows every service's grpc.health.v1 (no Deployments to discover them by here).
targets=$(echo "$SERVICE_TABLE" | awk '{printf "%s%s=127.0.0.1:%s", (NR>1?",":""), $1, $2}')
grpc_of() { echo "$SERVICE_TABLE" | awk -v s="$1" '$1==s{print $2}'; }
while read -r svc grpc_port metrics_port; do
  start "$svc" "$grpc_port" env KUBECONFIG="$KUBECONFIG_FILE" POD_NAMESPACE="$NAMESPACE" \
    JANGAR_HTTP_ADDR="127.0.0.1:$WATCH_HTTP_PORT" JANGAR_WATCH_TARGETS="$targets" \
    JANGAR_AGENTS_CONTROLLER_NAMESPACES="$NAMESPACE" JANGAR_GRPC_HOST=127.0.0.1 JANGAR_GRPC_PORT="$grpc_port" \
    JANGAR_METRICS_ADDR="127.0.0.1:$metrics_port" JANGAR_REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0" \
    JANGAR_STATUS_WRITER_ADDR="127.0.0.1:$(grpc_of status-writer)" JANGAR_EVENT_EMITTER_ADDR="127.0.0.1:$(grpc_of event-emitter)" \
    "${otel_env[@]}" $(svc_auth "$svc") $(svc_env "$svc") "$SERVICES_BIN/$svc"
done <<<"$SERVICE_TABLE"
while read -r svc _ metrics_port; do
  wait_for "$svc" 30 http_ok "http://127.0.0.1:$metrics_port/readyz"
done <<<"$SERVICE_TABLE"

cat <<EOF

agentplane is up (state in $LOCAL_DIR).
  export KUBECONFIG=$KUBECONFIG_FILE
  export PATH=$KUBE_DIR:$SERVICES_BIN:\$PATH     # the pinned kubectl, and agentctl
  kubectl get nodes
  kubectl apply -f examples/agentrun.yaml && kubectl get agentrun
  agentctl version
$(if [ "$ARCHIVE" = 0 ]; then echo "Run archive: off (AGENTPLANE_ARCHIVE=0); PostgreSQL runs at $ARCHIVE_URL"; else echo "Run archive (job-gc writes every finished run to it; watch-gateway reads it: agentctl get runs --archived): PostgreSQL at $ARCHIVE_URL"; fi)
Services (gRPC / metrics):
$(echo "$SERVICE_TABLE" | awk '{printf "  %-18s 127.0.0.1:%s  http://127.0.0.1:%s/metrics\n", $1, $2, $3}')
Web console (health, runs, a run's steps and Cancel, status history): http://localhost:$WATCH_HTTP_PORT/
Control-plane health stream: curl -N http://127.0.0.1:$WATCH_HTTP_PORT/api/agents/control-plane/status/stream
$(if [ "$WITH_JAEGER" = 1 ]; then echo "Traces (every service and kube-apiserver): Jaeger at http://127.0.0.1:$JAEGER_UI_PORT (query API under /api/; the web UI needs assets built with npm, see README)"; else echo "Tracing is off: 'make tools-jaeger', then 'make down' and 'make up', starts Jaeger and sends every service's spans to it."; fi)
status-writer and event-emitter accept only the controllers' ServiceAccount tokens ($TOKEN_DIR).
Logs are in $LOG_DIR; 'make down' stops everything.
EOF
