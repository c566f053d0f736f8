#!/usr/bin/env bash
# Shows what hack/cluster/up.sh is running: its processes and, when the API server answers, the nodes.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"
for name in $COMPONENTS registry containerd kubelet kube-proxy; do
  pid=$(pid_of "$name")
  [ -f "$RUN_DIR/$name.pid" ] || continue
  printf '  %-24s %s\n' "$name" "${pid:+running (pid $pid)}${pid:-stopped}"
done
[ -e "/run/netns/$NETNS" ] && echo "  network namespace $NETNS: $HOST_IP <-> $NODE_IP, pods $POD_CIDR"
kubectl=$(ls "$ROOT"/bin/tools/kube/*/kubectl 2>/dev/null | tail -1)
if [ -n "$kubectl" ] && [ -f "$KUBECONFIG_FILE" ]; then
  "$kubectl" --kubeconfig "$KUBECONFIG_FILE" --request-timeout 3s get nodes -o wide 2>/dev/null || echo "  the API server does not answer"
fi
