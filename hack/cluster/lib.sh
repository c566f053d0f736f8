# Shared settings of the local cluster scripts (up.sh, down.sh, status.sh): `make up`'s
# Kubernetes control plane plus a real node, in a state folder and on ports of their own.
#
# The real node lives in a network namespace of its own (NETNS), joined to the host by a veth
# pair: the host side has HOST_IP, the node NODE_IP, and its pods POD_CIDR (routed by the host
# through NODE_IP). Its containerd, kubelet and kube-proxy run in that namespace, so the node's
# bridge, its pods' interfaces and kube-proxy's iptables rules are the node's own, as on a
# separate machine; the host's (and Docker's) stay untouched, and deleting the namespace takes
# them all away. kube-apiserver, Redis and the registry listen on HOST_IP, which pods reach.
#
# Knobs: AGENTPLANE_CLUSTER_NAME (agentplane: the namespace, the node, cgroup and /run names),
# AGENTPLANE_CLUSTER_NET (0..255, default 0: which 10.250.N.0/30 link and 10.244.N.0/24 pod
# subnet), LOCAL_DIR (.cluster) and AGENTPLANE_PORT_OFFSET (7500: none of its ports meets one of
# make up's or of the e2e stacks' on offsets 1000 to 6000), so that a second cluster (the e2e
# suite's, offset 8500) runs beside a developer's.

CLUSTER_NAME=${AGENTPLANE_CLUSTER_NAME:-agentplane}
CLUSTER_NET=${AGENTPLANE_CLUSTER_NET:-0}
LOCAL_DIR=${LOCAL_DIR:-$ROOT/.cluster}
export AGENTPLANE_PORT_OFFSET=${AGENTPLANE_PORT_OFFSET:-7500}
# shellcheck source=../local/lib.sh
. "$ROOT/hack/local/lib.sh"

case $CLUSTER_NET in
  [0-9] | [1-9][0-9] | 1[0-9][0-9] | 2[0-4][0-9] | 25[0-5]) ;;
  *) die "AGENTPLANE_CLUSTER_NET=$CLUSTER_NET: want a number from 0 to 255" ;;
esac
case $CLUSTER_NAME in
  *[!a-z0-9-]* | "" | -*) die "AGENTPLANE_CLUSTER_NAME=$CLUSTER_NAME: want lower-case letters, digits and dashes" ;;
esac

NETNS=$CLUSTER_NAME-node
NODE_NAME=$CLUSTER_NAME-node
HOST_IF=apnode$CLUSTER_NET
HOST_IP=10.250.$CLUSTER_NET.1
NODE_IP=10.250.$CLUSTER_NET.2
POD_CIDR=10.244.$CLUSTER_NET.0/24
POD_GATEWAY=10.244.$CLUSTER_NET.1
# kube-apiserver's --service-cluster-ip-range is 10.96.0.0/16 (hack/local/up.sh): the
# `kubernetes` Service is 10.96.0.1, the cluster DNS 10.96.0.10.
DNS_IP=10.96.0.10
CLUSTER_DOMAIN=cluster.local

NODE_DIR=$LOCAL_DIR/node
# Sockets and containerd's state: short paths under /run (a unix socket path has 108 bytes).
RUN_ROOT=/run/$CLUSTER_NAME
CONTAINERD_SOCK=$RUN_ROOT/containerd.sock
CGROUP_ROOT=/$CLUSTER_NAME

REGISTRY_PORT=$(port REGISTRY 15000)
# Images are named after the registry's loopback address, as `docker push` and `helm push` see
# it; the node's containerd maps that name to HOST_IP (hosts.toml), where the registry listens too.
REGISTRY=127.0.0.1:$REGISTRY_PORT

# in_node CMD...: runs CMD in the node's network namespace (its mounts and everything else are the
# host's: the kubelet's volume mounts must be seen by containerd and runc).
in_node() { nsenter --net="/run/netns/$NETNS" -- "$@"; }

# Components of the node, in start order (down.sh stops them in reverse, before the control plane).
NODE_COMPONENTS="registry redis containerd kubelet kube-proxy kube-router"
