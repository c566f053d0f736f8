#!/usr/bin/env bash
# Shows what hack/cluster/up.sh is running: its processes and, when the API server answers, the nodes.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"
for name in $(echo $COMPONENTS $NODE_COMPONENTS | tr ' ' '\n' | awk '!seen[$0]++'); do
  [ -f "$RUN_DIR/$name.pid" ] || continue
  pid=$(pid_of "$name")
  if [ -n "$pid" ]; then state="running (pid $pid)"; else state=stopped; fi
  printf '  %-24s %s\n' "$name" "$state"
done
[ -e "/run/netns/$NETNS" ] && echo "  network namespace $NETNS: $HOST_IP <-> $NODE_IP, pods $POD_CIDR"
kubectl=$(ls "$ROOT"/bin/tools/kube/*/kubectl 2>/dev/null | tail -1)
if [ -n "$kubectl" ] && [ -f "$KUBECONFIG_FILE" ]; then
  "$kubectl" --kubeconfig "$KUBECONFIG_FILE" --request-timeout 3s get nodes -o wide 2>/dev/null || echo "  the API server does not answer"
fi
