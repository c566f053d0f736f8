#!/usr/bin/env bash
# Shows which parts of the local control plane run.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"

for name in $COMPONENTS; do
  pid=$(pid_of "$name")
  if [ -n "$pid" ]; then printf '%-24s running (pid %s)\n' "$name" "$pid"; else printf '%-24s stopped\n' "$name"; fi
done
[ -f "$KUBECONFIG_FILE" ] && echo "kubeconfig: $KUBECONFIG_FILE"
exit 0
