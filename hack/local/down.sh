#!/usr/bin/env bash
# Stops everything up.sh started, newest first: SIGTERM, then SIGKILL after a grace period.
# Leaves no process behind; keeps the state in LOCAL_DIR (delete it, or `make clean`, for a
# fresh cluster next time). With component names as arguments (`make down ONLY=cancel-propagator`)
# it stops only those, and `make up` starts them again with the environment it is given (how the
# runbooks turn a service's feature flag off and on locally).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"

[ -d "$RUN_DIR" ] || { echo "nothing running (no $RUN_DIR)"; exit 0; }
only="$*"
for name in $only; do
  case " $COMPONENTS " in *" $name "*) ;; *) die "no component $name; the components are: $COMPONENTS" ;; esac
done
reversed=$(echo ${only:-$COMPONENTS} | tr ' ' '\n' | tac)
for name in $reversed; do
  pid=$(pid_of "$name")
  if [ -n "$pid" ]; then
    echo "   stopping $name (pid $pid)"
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then
      echo "   $name did not stop within 10s; killing it"
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$RUN_DIR/$name.pid"
done
if [ -n "$only" ]; then
  echo "stopped $only"
  exit 0
fi
# Any control-plane process of this stack still alive (a child a component left behind) goes too.
left=$(pgrep -f -- "$KUBECONFIG_FILE|--data-dir $LOCAL_DIR/etcd" || true)
if [ -n "$left" ]; then
  echo "   killing leftover processes: $left"
  kill -KILL $left 2>/dev/null || true
fi
echo "agentplane local control plane stopped"
