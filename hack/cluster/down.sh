#!/usr/bin/env bash
# Stops everything hack/cluster/up.sh started and leaves nothing of the node behind: every pod
# is stopped and removed through the CRI (so the CNI plugins release its interfaces and its
# network namespace), then the kubelet's volume mounts and containerd's mounts are released,
# the node's network namespace (its bridge, veths and kube-proxy's iptables rules) deleted, its
# cgroups removed, and the control plane, Redis and the registry stopped. The state folder is
# kept (images, etcd data, keys): delete it for a fresh cluster. e2e/cluster_test.go checks
# that no mount, interface, namespace, iptables rule, cgroup or process is left.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"
CRICTL=${CRICTL:-}

[ "$(id -u)" = 0 ] || die "make cluster-down needs root, as cluster-up did"

stop() { # stop NAME: SIGTERM, SIGKILL after 10 s
  local pid
  pid=$(pid_of "$1")
  if [ -n "$pid" ]; then
    echo "   stopping $1 (pid $pid)"
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then
      echo "   $1 did not stop within 10s; killing it"
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$RUN_DIR/$1.pid"
}

# The kubelet first, so that it starts no pod again; then every pod through the CRI.
stop kube-router
stop kube-proxy
stop kubelet
if [ -n "$(pid_of containerd)" ] && [ -n "$CRICTL" ] && [ -x "$CRICTL" ]; then
  crictl=("$CRICTL" --runtime-endpoint "unix://$CONTAINERD_SOCK" --timeout 30s)
  pods=$("${crictl[@]}" pods -q 2>/dev/null || true)
  if [ -n "$pods" ]; then
    echo "   removing $(echo "$pods" | wc -l) pods"
    # shellcheck disable=SC2086
    "${crictl[@]}" stopp $pods >/dev/null 2>&1 || true
    # shellcheck disable=SC2086
    "${crictl[@]}" rmp -f $pods >/dev/null 2>&1 || true
  fi
fi
stop containerd
# A shim whose containerd is gone (a pod the CRI could not remove) holds mounts: end it.
shims=$(pgrep -f -- "containerd-shim.*-address $CONTAINERD_SOCK( |$)" || true)
if [ -n "$shims" ]; then
  echo "   killing leftover shims: $(echo $shims)"
  kill -KILL $shims 2>/dev/null || true
  sleep 0.5
fi

# Mounts under the node's folders (the kubelet's volumes, containerd's root file systems and
# /dev/shm), deepest first; a busy one is detached lazily.
mounts=$(awk -v a="$NODE_DIR/" -v b="$RUN_ROOT/" 'index($5, a) == 1 || index($5, b) == 1 {print $5}' /proc/self/mountinfo | sort -r)
for m in $mounts; do
  umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || echo "   could not unmount $m" >&2
done

# The node's network namespace: its bridge, the pods' veths, kube-proxy's rules and the host's
# side of the link (with its route) go with it.
if [ -e "/run/netns/$NETNS" ]; then
  echo "   deleting network namespace $NETNS"
  ip netns del "$NETNS"
fi
ip link del "$HOST_IF" 2>/dev/null || true

# The pods' cgroups (kubelet's cgroupRoot), in every v1 hierarchy, innermost first.
for hier in /sys/fs/cgroup/*/; do
  [ -d "$hier${CGROUP_ROOT#/}" ] || continue
  find "$hier${CGROUP_ROOT#/}" -depth -type d -exec rmdir {} + 2>/dev/null || true
done
# The kubelet's links to container logs (a fixed folder) that point into this node's logs.
for l in /var/log/containers/*.log; do
  [ -L "$l" ] || continue
  case $(readlink "$l") in "$NODE_DIR"/*) rm -f "$l" ;; esac
done

stop registry
LOCAL_DIR=$LOCAL_DIR "$ROOT/hack/local/down.sh"
rm -rf "$RUN_ROOT"
echo "agentplane local cluster stopped (state kept in $LOCAL_DIR)"
