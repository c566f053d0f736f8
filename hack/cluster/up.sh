#!/usr/bin/env bash
# Starts a local Kubernetes cluster with a real node: `make up`'s control plane (etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler and kwok's simulated node, through
# hack/local/up.sh) listening where pods reach it, Redis, an OCI registry, and a node that runs
# real containers: containerd (the CRI plugin; its own root, state and socket, so Docker's is
# untouched), the kubelet, kube-proxy (iptables), kube-router (NetworkPolicy only) and a CNI
# bridge, in a network namespace of its own (lib.sh), with CoreDNS as the cluster DNS. No agentplane service runs: install the
# charts (README, "Install on a cluster"). Running it again starts only what is not running.
# Needs root (network namespace, mounts, cgroups) and the Docker engine (to build the pause and
# CoreDNS images it pushes to the registry). `make cluster-down` undoes it.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"

: "${KUBE_DIR:?set KUBE_DIR (make cluster-up does)}" "${TOOLS:?}"
KUBELET=$KUBE_DIR/kubelet
KUBE_PROXY=$KUBE_DIR/kube-proxy
: "${REGISTRY_BIN:?}" "${COREDNS_BIN:?}" "${PAUSE_BIN:?}" "${CRICTL:?}" "${KUBE_ROUTER:?}"
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}

[ "$(id -u)" = 0 ] || die "make cluster-up needs root: it creates a network namespace, mounts and cgroups for the node"
for bin in "$KUBELET" "$KUBE_PROXY" "$REGISTRY_BIN" "$COREDNS_BIN" "$PAUSE_BIN" "$CRICTL" "$KUBE_ROUTER"; do
  [ -x "$bin" ] || die "$bin is missing: run 'make tools-cluster'"
done
for cmd in containerd runc nsenter ip iptables ipset redis-server docker; do
  command -v "$cmd" >/dev/null || die "$cmd is missing: run 'make deps-cluster'"
done
[ -x /usr/lib/cni/bridge ] || die "the CNI plugins are missing (/usr/lib/cni/bridge): run 'make deps-cluster'"
docker info >/dev/null 2>&1 || die "the Docker engine is not running: cluster-up builds the pause and CoreDNS images with it"

timed() { # timed LABEL CMD...: runs CMD and says how long it took
  local label=$1 t0=$SECONDS
  shift
  "$@"
  echo "   ($label: $((SECONDS - t0)) s)"
}

quiet() { # quiet CMD...: runs CMD, showing its output only when it fails
  local out
  out=$("$@" 2>&1) || { echo "$out" >&2; die "$* failed"; }
}

# put FILE: writes stdin to FILE unless FILE already holds it (kube-proxy exits when its
# configuration file changes, so a second cluster-up must leave it alone).
put() {
  local tmp
  tmp=$(mktemp)
  cat >"$tmp"
  if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv "$tmp" "$1"; fi
}

mkdir -p "$RUN_DIR" "$LOG_DIR" "$NODE_DIR" "$RUN_ROOT"
KUBECTL=("$KUBE_DIR/kubectl" --kubeconfig "$KUBECONFIG_FILE")

# --- the node's network namespace and its link to the host ---
network() {
  echo ">> network: namespace $NETNS, $HOST_IF $HOST_IP <-> $NODE_IP, pods $POD_CIDR"
  if [ ! -e "/run/netns/$NETNS" ]; then
    ip netns add "$NETNS"
  fi
  if ! ip link show "$HOST_IF" >/dev/null 2>&1; then
    ip link add "$HOST_IF" type veth peer name eth0 netns "$NETNS"
    ip addr add "$HOST_IP/30" dev "$HOST_IF"
    ip link set "$HOST_IF" up
  fi
  in_node ip link set lo up
  if ! in_node ip -4 addr show dev eth0 | grep -q "inet $NODE_IP/"; then
    in_node ip addr add "$NODE_IP/30" dev eth0
  fi
  in_node ip link set eth0 up
  in_node ip route replace default via "$HOST_IP"
  ip route replace "$POD_CIDR" via "$NODE_IP" dev "$HOST_IF"
  # The node routes between its pods and the host; bridged pod traffic passes its iptables
  # (kube-proxy's Service rules between pods of one bridge need it).
  in_node sysctl -qw net.ipv4.ip_forward=1
  in_node sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
}
timed network network

# --- the control plane (make up's), listening on the host's side of the node's link ---
control_plane() {
  AGENTPLANE_CONTROL_PLANE_ONLY=1 AGENTPLANE_CRDS=0 AGENTPLANE_ADMISSION_POLICIES=0 AGENTPLANE_APISERVER_BIND_ADDRESS="$HOST_IP" AGENTPLANE_APISERVER_ADVERTISE_ADDRESS="$HOST_IP" \
    AGENTPLANE_NODE_NAME=kwok-node-0 LOCAL_DIR="$LOCAL_DIR" "$ROOT/hack/local/up.sh" | sed -n '/^   \|^>>/p'
}
timed control-plane control_plane
APISERVER_URL=https://$HOST_IP:$APISERVER_PORT

# --- Redis and the registry, on loopback and on the node's link ---
services() {
  echo ">> redis (:$REDIS_PORT) and the registry ($REGISTRY)"
  start redis "$REDIS_PORT" redis-server --port "$REDIS_PORT" --bind "127.0.0.1 $HOST_IP" --protected-mode no \
    --save "" --appendonly no --dir "$LOCAL_DIR"
  start registry "$REGISTRY_PORT" "$REGISTRY_BIN" -root "$LOCAL_DIR/registry" -listen "127.0.0.1:$REGISTRY_PORT" -listen "$HOST_IP:$REGISTRY_PORT"
  wait_for redis 15 port_taken "$REDIS_PORT"
  wait_for registry 15 http_ok "http://127.0.0.1:$REGISTRY_PORT/v2/"
  # PostgreSQL for the run archive (the charts' archive.*; docs/archive.md), where pods reach it,
  # with a password (in $LOCAL_DIR/postgres-password) that the charts read from a Secret.
  echo ">> postgres (:$POSTGRES_PORT)"
  start_postgres "127.0.0.1,$HOST_IP" "$LOCAL_DIR/postgres-password"
}
pg_bin
timed redis+registry+postgres services

# --- the node's own images, built FROM scratch and pushed to the registry ---
PAUSE_IMAGE=$REGISTRY/agentplane/pause:1.0
COREDNS_IMAGE=$REGISTRY/agentplane/coredns:$COREDNS_VERSION
node_images() {
  echo ">> images $PAUSE_IMAGE, $COREDNS_IMAGE"
  local ctx
  ctx=$(mktemp -d)
  cp "$PAUSE_BIN" "$ctx/pause"
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$ctx/Dockerfile"
  quiet docker build -q -t "$PAUSE_IMAGE" "$ctx"
  rm -f "$ctx/pause"
  cp "$COREDNS_BIN" "$ctx/coredns"
  printf 'FROM scratch\nCOPY coredns /coredns\nUSER 65532:65532\nENTRYPOINT ["/coredns"]\n' >"$ctx/Dockerfile"
  quiet docker build -q -t "$COREDNS_IMAGE" "$ctx"
  rm -rf "$ctx"
  quiet docker push -q "$PAUSE_IMAGE"
  quiet docker push -q "$COREDNS_IMAGE"
}
timed node-images node_images

# --- the node's credentials: client certificates for the kubelet (Node authorizer) and kube-proxy ---
credentials() {
  local name=$1 subj=$2
  if [ ! -f "$PKI_DIR/$name.crt" ]; then
    openssl req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$PKI_DIR/$name.key" -out "$PKI_DIR/$name.csr" 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' >"$PKI_DIR/$name.ext"
    openssl x509 -req -in "$PKI_DIR/$name.csr" -CA "$PKI_DIR/ca.crt" -CAkey "$PKI_DIR/ca.key" -CAcreateserial \
      -days 3650 -extfile "$PKI_DIR/$name.ext" -out "$PKI_DIR/$name.crt" 2>/dev/null
    chmod 600 "$PKI_DIR/$name.key"
  fi
  put "$NODE_DIR/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "$APISERVER_URL", certificate-authority: "$PKI_DIR/ca.crt"}
users:
- name: $name
  user: {client-certificate: "$PKI_DIR/$name.crt", client-key: "$PKI_DIR/$name.key"}
contexts:
- name: local
  context: {cluster: local, user: $name}
current-context: local
EOF
  chmod 600 "$NODE_DIR/$name.kubeconfig"
}
credentials kubelet "/O=system:nodes/CN=system:node:$NODE_NAME"
credentials kube-proxy "/CN=system:kube-proxy"
credentials kube-router "/CN=system:kube-router"

# --- containerd: the CRI plugin, its own root, state and socket ---
mkdir -p "$NODE_DIR/containerd" "$NODE_DIR/cni/net.d" "$NODE_DIR/certs.d/$REGISTRY"
put "$NODE_DIR/certs.d/$REGISTRY/hosts.toml" <<EOF
# Images named $REGISTRY (the registry's loopback address on the host) are pulled from the
# registry's address on the node's link.
server = "http://$HOST_IP:$REGISTRY_PORT"

[host."http://$HOST_IP:$REGISTRY_PORT"]
  capabilities = ["pull", "resolve"]
EOF
# Images named after Docker Hub are looked up in the local registry first, as a pull-through
# mirror is in an air-gapped cluster (this machine reaches no public registry): what is pushed
# there as library/redis:7.4 answers for redis:7.4.
mkdir -p "$NODE_DIR/certs.d/docker.io"
put "$NODE_DIR/certs.d/docker.io/hosts.toml" <<EOF
server = "https://registry-1.docker.io"

[host."http://$HOST_IP:$REGISTRY_PORT"]
  capabilities = ["pull", "resolve"]
EOF
put "$NODE_DIR/containerd.toml" <<EOF
version = 2
root = "$NODE_DIR/containerd"
state = "$RUN_ROOT/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.grpc.v1.introspection.tracing"]

[grpc]
  address = "$CONTAINERD_SOCK"

[plugins."io.containerd.internal.v1.opt"]
  path = "$NODE_DIR/containerd-opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # This VM refuses negative oom_score_adj writes; without this every sandbox fails to start.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$RUN_ROOT/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$NODE_DIR/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$NODE_DIR/certs.d"
EOF
put "$NODE_DIR/cni/net.d/10-agentplane.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CLUSTER_NAME",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$POD_GATEWAY"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$NODE_DIR/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
containerd_up() {
  echo ">> containerd ($CONTAINERD_SOCK)"
  start containerd - nsenter --net="/run/netns/$NETNS" -- containerd --config "$NODE_DIR/containerd.toml"
  wait_for containerd 30 "$CRICTL" --runtime-endpoint "unix://$CONTAINERD_SOCK" info
}
timed containerd containerd_up

# --- the kubelet and kube-proxy ---
# The kubelet puts every pod under its cgroupRoot, which must exist in each v1 hierarchy (a new
# cpuset cgroup has no CPUs or memory nodes until given its parent's).
for hier in /sys/fs/cgroup/*/; do
  [ -e "${hier}cgroup.procs" ] && [ "$hier" != /sys/fs/cgroup/unified/ ] || continue
  mkdir -p "$hier${CGROUP_ROOT#/}"
  if [ -e "$hier${CGROUP_ROOT#/}/cpuset.cpus" ]; then
    [ -n "$(cat "$hier${CGROUP_ROOT#/}/cpuset.cpus")" ] || cat "${hier}cpuset.cpus" >"$hier${CGROUP_ROOT#/}/cpuset.cpus"
    [ -n "$(cat "$hier${CGROUP_ROOT#/}/cpuset.mems")" ] || cat "${hier}cpuset.mems" >"$hier${CGROUP_ROOT#/}/cpuset.mems"
  fi
done
put "$NODE_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$PKI_DIR/ca.crt"}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
# This machine has cgroup v1, which the kubelet refuses by default.
failCgroupV1: false
failSwapOn: false
clusterDNS: [$DNS_IP]
clusterDomain: $CLUSTER_DOMAIN
resolvConf: /etc/resolv.conf
podLogsDir: $NODE_DIR/pod-logs
maxPods: 110
serializeImagePulls: false
# A shared development machine: evict only when truly out of room, never collect images.
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
put "$NODE_DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $NODE_DIR/kube-proxy.kubeconfig
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $POD_CIDR
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [primary]
conntrack:
  # Leave the host's conntrack table size alone.
  maxPerCore: 0
EOF
node_up() {
  echo ">> kubelet, kube-proxy and kube-router (node $NODE_NAME, $NODE_IP)"
  start kubelet - nsenter --net="/run/netns/$NETNS" -- "$KUBELET" --config "$NODE_DIR/kubelet.yaml" \
    --kubeconfig "$NODE_DIR/kubelet.kubeconfig" --root-dir "$NODE_DIR/kubelet" --cert-dir "$NODE_DIR/kubelet-pki" \
    --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --node-labels "agentplane.dev/node=real"
  start kube-proxy - nsenter --net="/run/netns/$NETNS" -- "$KUBE_PROXY" --config "$NODE_DIR/kube-proxy.yaml"
  node_ready() { "${KUBECTL[@]}" get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True; }
  wait_for kubelet 120 node_ready
  # kube-proxy's healthz answers 200 once its rules are in place. kube-router starts after it: it
  # needs the node object, and it rewrites the filter table whole, which would race kube-proxy's
  # first sync.
  wait_for kube-proxy 60 in_node curl -fsS --max-time 2 http://127.0.0.1:10256/healthz
  # NetworkPolicy: kube-router's firewall alone (no routing, no service proxy), its iptables
  # rules and ipsets in the node's namespace. It reads pods, namespaces and policies (RBAC below).
  "${KUBECTL[@]}" apply --server-side --force-conflicts -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:kube-router
rules:
  - apiGroups: [""]
    resources: [pods, namespaces, nodes, services, endpoints]
    verbs: [get, list, watch]
  - apiGroups: [networking.k8s.io]
    resources: [networkpolicies]
    verbs: [get, list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:kube-router
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:kube-router}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: system:kube-router}
EOF
  start kube-router - nsenter --net="/run/netns/$NETNS" -- "$KUBE_ROUTER" --kubeconfig "$NODE_DIR/kube-router.kubeconfig" \
    --run-firewall=true --run-router=false --run-service-proxy=false --hostname-override "$NODE_NAME" \
    --service-cluster-ip-range 10.96.0.0/16 --metrics-port 0 --health-port 20244
  wait_for kube-router 60 in_node curl -fsS --max-time 2 http://127.0.0.1:20244/healthz
}
timed node node_up

# The kwok node keeps bulk run pods (the kubelet holds 110): only pods that tolerate its taint
# land there; everything else goes to the real node.
"${KUBECTL[@]}" taint node kwok-node-0 kwok.x-k8s.io/node=fake:NoSchedule --overwrite >/dev/null

# The registry, announced as KEP-1755 describes (what Tilt and other dev tools read to know where
# to push, and how the node names it).
"${KUBECTL[@]}" apply --server-side --force-conflicts -f - >/dev/null <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: local-registry-hosting
  namespace: kube-public
data:
  localRegistryHosting.v1: |
    host: "$REGISTRY"
    hostFromContainerRuntime: "$REGISTRY"
    help: "make push REGISTRY=$REGISTRY pushes agentplane's images and charts (README, Install on a cluster)"
EOF

# --- CoreDNS, behind the cluster DNS Service IP the kubelet hands to pods ---
dns_up() {
  echo ">> CoreDNS ($DNS_IP)"
  sed -e "s|@IMAGE@|$COREDNS_IMAGE|g" -e "s|@DNS_IP@|$DNS_IP|g" -e "s|@DOMAIN@|$CLUSTER_DOMAIN|g" "$HERE/coredns.yaml" |
    "${KUBECTL[@]}" apply --server-side --force-conflicts -f - >/dev/null
  "${KUBECTL[@]}" -n kube-system rollout status deployment/coredns --timeout 180s >/dev/null ||
    { "${KUBECTL[@]}" -n kube-system describe pods -l k8s-app=kube-dns | tail -30 >&2; die "CoreDNS did not become available"; }
}
timed dns dns_up

cat <<EOF

The local cluster is up (state in $LOCAL_DIR): node $NODE_NAME runs real containers, kwok-node-0
simulates pods that tolerate kwok.x-k8s.io/node=fake:NoSchedule.
  export KUBECONFIG=$KUBECONFIG_FILE
  export PATH=$KUBE_DIR:$ROOT/bin:\$PATH
  kubectl get nodes -o wide
Registry: $REGISTRY (push with docker/helm; the node pulls it from $HOST_IP:$REGISTRY_PORT)
Redis, for pods: redis://$HOST_IP:$REDIS_PORT/0
PostgreSQL (the run archive), for pods: postgres://agentplane@$HOST_IP:$POSTGRES_PORT/agentplane?sslmode=disable, password in $LOCAL_DIR/postgres-password
Install agentplane (README, "Install on a cluster"):
  make push REGISTRY=$REGISTRY
  helm install agentplane oci://$REGISTRY/charts/agentplane --version \$(make -s chart-version) --plain-http \\
    -n agents --set image.registry=$REGISTRY --set redis.url=redis://$HOST_IP:$REDIS_PORT/0
Logs are in $LOG_DIR; 'make cluster-down' stops everything.
EOF
