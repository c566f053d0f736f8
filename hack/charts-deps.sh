#!/usr/bin/env bash
# Builds the charts' dependencies with `helm dependency update` (which writes each Chart.lock, not
# kept in git): the library chart (charts/agentplane-lib) into each service chart's charts/, then
# the CRDs' chart, the service charts and the library into the agentplane chart's. Nothing is fetched: every dependency is a
# file:// chart beside it. Skipped when no file the charts are made of changed since the last build
# (a stamp of their hash), and under a lock, so that test processes started together build once
# and never read a dependency while another writes it.
#   make charts-deps                       # charts/ of this tree
#   CHARTS_DIR=/tmp/x/charts hack/charts-deps.sh   # another copy (hack/charts.sh packages one)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
: "${HELM:?HELM: the helm binary (make charts-deps sets it)}"
CHARTS_DIR=${CHARTS_DIR:-$ROOT/charts}
[ -x "$HELM" ] || { echo "error: $HELM is missing: run make tools" >&2; exit 1; }
SERVICES="status-writer event-emitter job-gc cancel-propagator run-controller watch-gateway"
exec 9>"$CHARTS_DIR/.deps-lock"
flock 9
hash=$(cd "$CHARTS_DIR" && find . -path './*/charts' -prune -o -type f ! -name '.deps-*' ! -name Chart.lock -print0 \
  | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
stamp=$CHARTS_DIR/.deps-stamp
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ]; then
  exit 0
fi
rm -f "$stamp"
for c in $SERVICES agentplane; do
  if ! out=$("$HELM" dependency update --skip-refresh "$CHARTS_DIR/$c" 2>&1); then
    echo "$out" >&2
    echo "error: helm dependency update $CHARTS_DIR/$c failed" >&2
    exit 1
  fi
done
echo "$hash" >"$stamp"
